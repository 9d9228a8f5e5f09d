"""SCRAM credentials in ZooKeeper, as Kafka's ZooKeeper mode keeps them: ``/config/users/<user>``
(the user name sanitized, :func:`pyklog.broker.zk.paths.user_config`) holds
``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,iterations=8192"}}``
(other user configs, such as quotas, are kept as they are).  A change is followed by a notification
``/config/changes/config_change_<seq>`` with ``entity_path`` ``users/<user>``, as Kafka's
``AdminZkClient.changeConfigs`` writes, and every broker applies it at once
(:meth:`ZkScramCredentials.follow`).

Used by the broker (the credential cache of its SASL listeners, Describe/AlterUserScramCredentials)
and by ``pyklog-configs --zookeeper`` (a credential written before any broker runs).

Logs and errors never hold a credential (only user names, mechanisms and iteration counts).

Thread-safety: thread-safe (versioned writes, read again after a concurrent change); the follow
callback runs on kazoo's threads.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from pyklog.broker.security.scram import MECHANISMS, ScramCredential, ScramError
from pyklog.broker.zk import paths
from pyklog.broker.zk.session import watch_callback
from pyklog.broker.zk.znodes import decode_config_change, encode_config_change, encode_topic_config

log = logging.getLogger(__name__)

UserCredentials = dict[str, ScramCredential]


def _decode_user_config(data: bytes) -> dict[str, str] | None:
    """The config map of a user node; None when it is not Kafka's JSON (never quoting the data)."""
    try:
        obj = json.loads(data.decode("utf-8")) if data else {}
        config = obj.get("config") or {}
        if not isinstance(config, dict):
            return None
        return {str(k): str(v) for k, v in config.items()}
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None


class ZkScramCredentials:
    """Reads, writes and follows the SCRAM credentials of ``/config/users``.  ``session`` is a
    :class:`~pyklog.broker.zk.session.ZkSession` (or anything with ``zk`` and ``retry``)."""

    def __init__(self, session):
        self.session = session
        self._watch_lock = threading.Lock()
        self._seen: set[str] = set()
        self._primed = False
        self._on_all: Callable[[dict], None] = lambda users: None
        self._on_user: Callable[[str, UserCredentials], None] = lambda user, creds: None

    # ------------------------------------------------------------------ reads

    def _user_config(self, user: str) -> tuple[dict[str, str], object | None]:
        path = paths.user_config(user)
        try:
            data, stat = self.session.retry(self.session.zk.get, path)
        except NoNodeError:
            return {}, None
        config = _decode_user_config(data)
        if config is None:
            log.error('ignoring %s: not Kafka\'s {"version":1,"config":{...}}', path)
            return {}, stat
        return config, stat

    def credentials(self, user: str) -> UserCredentials:
        """The user's SCRAM credentials by mechanism name ({} if none); a value that does not
        parse is logged (without it) and skipped."""
        config, _ = self._user_config(user)
        out: UserCredentials = {}
        for mech in MECHANISMS:
            text = config.get(mech)
            if text is None:
                continue
            try:
                out[mech] = ScramCredential.from_kafka_string(text)
            except ScramError as e:
                log.error("ignoring the %s credential of user %s in ZooKeeper: %s", mech, user, e)
        return out

    def users(self) -> list[str]:
        """Every user with a node under ``/config/users`` (desanitized), sorted."""
        try:
            children = self.session.retry(self.session.zk.get_children, paths.CONFIG_USERS)
        except NoNodeError:
            return []
        return sorted(paths.desanitize_user(c) for c in children)

    def all_credentials(self) -> dict[str, UserCredentials]:
        out = {}
        for user in self.users():
            creds = self.credentials(user)
            if creds:
                out[user] = creds
        return out

    # ------------------------------------------------------------------ writes

    def alter(
        self, user: str, upserts: dict[str, ScramCredential] | None = None, deletions: Iterable[str] = ()
    ) -> UserCredentials:
        """Set (``upserts``: mechanism name -> credential) and delete (mechanism names) the user's
        credentials in one versioned write, then notify every broker (``users/<user>``).  Returns
        the user's credentials after the change.  A user node left with no config is deleted."""
        path = paths.user_config(user)
        while True:
            config, stat = self._user_config(user)
            for mech in deletions:
                config.pop(mech, None)
            for mech, cred in (upserts or {}).items():
                config[mech] = cred.to_kafka_string()
            try:
                if stat is None:
                    if not config:
                        break
                    self.session.retry(self.session.zk.create, path, encode_topic_config(config), makepath=True)
                elif config:
                    self.session.retry(self.session.zk.set, path, encode_topic_config(config), version=stat.version)
                else:
                    self.session.retry(self.session.zk.delete, path, version=stat.version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # a concurrent change: read again
        self.session.retry(
            self.session.zk.create,
            paths.CONFIG_CHANGE_PREFIX,
            encode_config_change(f"users/{paths.sanitize_user(user)}"),
            sequence=True,
            makepath=True,
        )
        changed = sorted(set(upserts or {}) | set(deletions))
        log.info("altered SCRAM credentials of user %s: %s", user, ", ".join(changed))
        return self.credentials(user)

    # ------------------------------------------------------------------ following changes

    def follow(self, on_user: Callable[[str, UserCredentials], None], on_all: Callable[[dict], None]) -> None:
        """Load every user's credentials now (``on_all(users)``), then call ``on_user(user,
        credentials)`` for each ``users/<user>`` change notification (kazoo's thread).  The watch of
        ``/config/changes`` re-arms after reconnects; after a reconnect everything is read again."""
        self._on_user, self._on_all = on_user, on_all
        ChildrenWatch(self.session.zk, paths.CONFIG_CHANGES, self._on_changes)

    @watch_callback
    def _on_changes(self, children) -> bool | None:
        on_user = self._on_user
        with self._watch_lock:
            new = [c for c in sorted(children or ()) if c not in self._seen]
            primed, self._primed = self._primed, True
            self._seen = set(children or ())
            if not primed:  # kazoo's first call, in the constructor: load everything
                self._on_all(self.all_credentials())
                return None
            users = set()
            for c in new:
                path = paths.child(paths.CONFIG_CHANGES, c)
                try:
                    data, _ = self.session.retry(self.session.zk.get, path)
                    entity = decode_config_change(data, path)
                except NoNodeError:
                    continue
                except Exception as e:  # noqa: BLE001 - a bad notification must not stop the others
                    log.warning("ignoring config change notification %s: %s", path, e)
                    continue
                kind, _, name = entity.partition("/")
                if kind == "users" and name:
                    users.add(paths.desanitize_user(name))
            for user in sorted(users):
                try:
                    creds = self.credentials(user)
                except Exception as e:  # noqa: BLE001
                    log.warning("cannot read the SCRAM credentials of user %s: %s", user, e)
                    continue
                on_user(user, creds)
                log.info("SCRAM credentials of user %s now: %s", user, ", ".join(sorted(creds)) or "none")
        return None
