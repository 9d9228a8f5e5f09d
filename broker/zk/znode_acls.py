"""ZooKeeper credentials and the ACLs of every znode pyklog creates (Kafka's ``ZkData.defaultAcls``).

**Credentials.**  pyklog authenticates to ZooKeeper with ZooKeeper's ``digest`` scheme (``addauth
digest user:password``; kazoo's ``auth_data=[("digest", "user:password")]``).  They are given as
Kafka gives its ZooKeeper client credentials, the JAAS ``Client`` section's login module entry::

    org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="...";

either as that one entry (the broker's ``zookeeper.jaas.config``, the connector's option of the same
name: :func:`parse_client_jaas`) or as a JAAS file with a ``Client { ... };`` section, named by
``-Djava.security.auth.login.config=<file>`` in the ``KAFKA_OPTS`` environment variable, as Kafka's
brokers and tools read it (:func:`credentials_from_environment`; ``-Dzookeeper.sasl.clientconfig=<name>``
picks another section, as in Kafka).

**ACLs** (:func:`default_acls`, relative to the chroot).  Without ``secure`` every znode is
``world:anyone`` ALL, as before.  With ``secure`` (a broker's ``zookeeper.set.acl=true``; a tool
that has credentials, as Kafka's tools with a JAAS file) a znode gets ALL for this client's digest
identity plus READ for everyone (Kafka's ``CREATOR_ALL_ACL`` + ``READ_ACL_UNSAFE``), and no READ for
anyone else under the sensitive roots (``/config/users``: SCRAM credentials; ``/config/brokers``:
dynamic broker configs, some of them passwords; ``/delegation_token``), as Kafka's
``SensitiveRootPaths``.  ``/consumers`` and everything under it stays open (Kafka leaves
``/consumers`` open so that ZooKeeper consumer groups work; pyklog's members, committing to each
other's partitions after a rebalance, need the whole subtree open), and so does pyklog's
``/pyklog_spark_sinks`` root (a Spark sink with credentials protects its own query's nodes).

ZooKeeper stores a digest identity as ``user:base64(sha1(user:password))`` (:func:`digest_id`): a
changed password is another identity, which no longer owns the nodes the old one created.

Pure code (no ZooKeeper connection; :func:`credentials_from_environment` reads one file).  Values
are immutable and thread-safe.  Errors never quote a password: :class:`ZkCredentialsError` says what
was expected and where.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import os
import re
import shlex
from collections.abc import Mapping

from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, Id, Permissions

from pyklog.broker.errors import ConfigError
from pyklog.broker.zk import paths

DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
JAAS_FILE_PROPERTY = "java.security.auth.login.config"
CLIENT_SECTION_PROPERTY = "zookeeper.sasl.clientconfig"
DEFAULT_CLIENT_SECTION = "Client"
_FLAGS = ("required", "requisite", "sufficient", "optional")

WORLD_ALL = ACL(Permissions.ALL, Id("world", "anyone"))
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))
OPEN_ACL = (WORLD_ALL,)

#: Kafka's SensitiveRootPaths: readable only by their owner.
SENSITIVE_ROOTS = (paths.CONFIG_USERS, paths.CONFIG_BROKERS, paths.DELEGATION_TOKEN)
#: Subtrees whose znodes are created by clients and stay world-writable.
OPEN_ROOTS = (paths.CONSUMERS, paths.SPARK_SINKS)


class ZkCredentialsError(ConfigError):
    """Malformed or unusable ZooKeeper credentials (the message never holds the password)."""


@dataclasses.dataclass(frozen=True)
class ZkCredentials:
    """One digest identity.  ``repr``/``str`` hide the password."""

    username: str
    password: str = dataclasses.field(repr=False)

    def __post_init__(self):
        if not self.username or ":" in self.username:
            raise ZkCredentialsError("ZooKeeper digest username must be non-empty and contain no ':'")
        if not self.password:
            raise ZkCredentialsError(f"ZooKeeper digest credentials for user {self.username!r} have an empty password")

    def __str__(self) -> str:
        return f"digest:{self.username}"

    def jaas_entry(self) -> str:
        """The JAAS entry these credentials are written as (holds the password: never log it)."""

        def quoted(v: str) -> str:
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

        return f"{DIGEST_LOGIN_MODULE} required username={quoted(self.username)} password={quoted(self.password)};"

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data`` (``addauth digest user:password``)."""
        return [("digest", f"{self.username}:{self.password}")]

    @property
    def digest_id(self) -> str:
        return digest_id(self.username, self.password)

    @property
    def owner_acl(self) -> ACL:
        """ALL for this identity (what ZooKeeper stores for Kafka's ``CREATOR_ALL_ACL``)."""
        return ACL(Permissions.ALL, Id("digest", self.digest_id))


def digest_id(username: str, password: str) -> str:
    """ZooKeeper's ``DigestAuthenticationProvider.generateDigest``: ``user:base64(sha1(user:password))``."""
    h = hashlib.sha1(f"{username}:{password}".encode()).digest()  # noqa: S324 - ZooKeeper's scheme
    return f"{username}:{base64.b64encode(h).decode('ascii')}"


# ---------------------------------------------------------------------------------- ACL policy


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def is_sensitive(path: str) -> bool:
    return any(_under(path, r) for r in SENSITIVE_ROOTS)


def is_open(path: str) -> bool:
    return any(_under(path, r) for r in OPEN_ROOTS)


def default_acls(path: str, credentials: ZkCredentials | None, secure: bool) -> list[ACL]:
    """The ACL a znode at ``path`` (relative to the chroot) is created with; see the module doc."""
    if not secure or credentials is None or is_open(path):
        return list(OPEN_ACL)
    if is_sensitive(path):
        return [credentials.owner_acl]
    return [credentials.owner_acl, WORLD_READ]


def acl_key(acls) -> frozenset:
    """An order-free comparable form of a znode's ACL list."""
    return frozenset((a.perms, a.id.scheme, a.id.id) for a in acls)


def owners(acls) -> list[str]:
    """The digest user names that hold WRITE in ``acls`` (for error messages; never a hash)."""
    return sorted({a.id.id.split(":", 1)[0] for a in acls if a.id.scheme == "digest" and a.perms & Permissions.WRITE})


def world_writable(acls) -> bool:
    """True if anyone may change, create under or delete under a znode with this ACL."""
    bad = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN
    return any(a.id.scheme == "world" and a.perms & bad for a in acls)


# ---------------------------------------------------------------------------------- JAAS


_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|[{};=]|[^\s{};="]+', re.DOTALL)


def _tokens(text: str, where: str) -> list[tuple[str, bool]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ZkCredentialsError(f"{where}: unterminated quoted value or comment at character {pos}")
        tok = m.group(0)
        pos = m.end()
        if tok[0].isspace() or tok.startswith(("//", "/*")):
            continue
        if tok[0] == '"':
            out.append((re.sub(r"\\(.)", r"\1", tok[1:-1], flags=re.DOTALL), True))
        else:
            out.append((tok, False))
    return out


def _entry(toks: list[tuple[str, bool]], where: str) -> ZkCredentials:
    """``<module> <flag> name=value ...`` (without the closing ``;``) -> credentials."""
    if len(toks) < 2 or toks[0][1] or toks[1][1]:
        raise ZkCredentialsError(f'{where}: expected \'{DIGEST_LOGIN_MODULE} required username="..." password="...";\'')
    module, flag = toks[0][0], toks[1][0]
    if flag.lower() not in _FLAGS:
        raise ZkCredentialsError(f"{where}: invalid control flag {flag!r} (expected one of {', '.join(_FLAGS)})")
    if module != DIGEST_LOGIN_MODULE:
        raise ZkCredentialsError(
            f"{where}: login module {module!r} is not supported: pyklog authenticates to ZooKeeper with "
            f"the digest scheme, given as {DIGEST_LOGIN_MODULE}"
        )
    options: dict[str, str] = {}
    rest = toks[2:]
    i = 0
    while i < len(rest):
        name, quoted = rest[i]
        if quoted or name in "=;{}" or i + 2 >= len(rest) or rest[i + 1] != ("=", False):
            raise ZkCredentialsError(f'{where}: expected option name="value" after the control flag')
        options[name] = rest[i + 2][0]
        i += 3
    missing = [k for k in ("username", "password") if not options.get(k)]
    if missing:
        raise ZkCredentialsError(f"{where}: {DIGEST_LOGIN_MODULE} needs {' and '.join(missing)}")
    return ZkCredentials(options["username"], options["password"])


def parse_client_jaas(text: str, where: str = "zookeeper.jaas.config") -> ZkCredentials:
    """One login module entry (``DigestLoginModule required username=".." password="..";``)."""
    toks = _tokens(text or "", where)
    if not toks or toks[-1] != (";", False):
        raise ZkCredentialsError(f"{where}: a JAAS login module entry must end with ';'")
    toks = toks[:-1]
    if any(t in ((";", False), ("{", False), ("}", False)) for t in toks):
        raise ZkCredentialsError(f"{where}: expected exactly one login module entry")
    return _entry(toks, where)


def parse_jaas_file_section(text: str, section: str, where: str) -> ZkCredentials | None:
    """The credentials of ``section`` (``Client { ... };``) in a JAAS file; None if it has none."""
    toks = _tokens(text, where)
    i = 0
    while i < len(toks):
        if i + 1 >= len(toks) or toks[i + 1] != ("{", False):
            raise ZkCredentialsError(f"{where}: expected '<Section> {{' at section {len(toks) and toks[i][0]!r}")
        name = toks[i][0]
        try:
            close = toks.index(("}", False), i + 2)
        except ValueError:
            raise ZkCredentialsError(f"{where}: section {name!r} has no closing '}}'") from None
        body = toks[i + 2 : close]
        i = close + 1
        if i < len(toks) and toks[i] == (";", False):
            i += 1
        if name != section:
            continue
        entries, cur = [], []
        for t in body:
            if t == (";", False):
                entries.append(cur)
                cur = []
            else:
                cur.append(t)
        if cur:
            raise ZkCredentialsError(f"{where}: section {name!r}: a login module entry must end with ';'")
        if len(entries) != 1:
            raise ZkCredentialsError(f"{where}: section {name!r} must hold exactly one login module entry")
        return _entry(entries[0], f"{where} section {name}")
    return None


def java_system_properties(opts: str) -> dict[str, str]:
    """``-Dname=value`` items of a ``KAFKA_OPTS``-style string (shell quoting honoured)."""
    try:
        words = shlex.split(opts or "")
    except ValueError:
        raise ZkCredentialsError("KAFKA_OPTS: unbalanced quotes") from None
    out = {}
    for w in words:
        if w.startswith("-D") and "=" in w:
            k, _, v = w[2:].partition("=")
            out[k] = v
    return out


def credentials_from_environment(environ: Mapping[str, str] | None = None) -> ZkCredentials | None:
    """Kafka's way: the JAAS file named by ``-Djava.security.auth.login.config`` in ``KAFKA_OPTS``,
    its ``Client`` section (or ``-Dzookeeper.sasl.clientconfig``'s).  None when no file is named or
    the file has no such section; :class:`ZkCredentialsError` when it is unreadable or malformed."""
    env = os.environ if environ is None else environ
    props = java_system_properties(env.get("KAFKA_OPTS", ""))
    path = props.get(JAAS_FILE_PROPERTY)
    if not path:
        return None
    section = props.get(CLIENT_SECTION_PROPERTY) or DEFAULT_CLIENT_SECTION
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ZkCredentialsError(f"JAAS file {path} (KAFKA_OPTS -D{JAAS_FILE_PROPERTY}): {e.strerror}") from None
    return parse_jaas_file_section(text, section, f"JAAS file {path}")


class _HideAuthPackets(logging.Filter):
    """kazoo logs each request it sends at DEBUG, the ``Auth`` packet (``user:password``) too: the
    credential is replaced before any handler sees the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, Auth) for a in args):
            record.args = tuple(a._replace(auth="[hidden]") if isinstance(a, Auth) else a for a in args)
        return True


_HIDE_AUTH = _HideAuthPackets()


def hide_credentials_in_kazoo_logs() -> None:
    """Install the filter on kazoo's client logger (idempotent); called wherever a client with
    credentials is built."""
    logging.getLogger("kazoo.client").addFilter(_HIDE_AUTH)


def client_credentials(credentials: ZkCredentials | None, environ: Mapping[str, str] | None = None):
    """A client's credentials: the ones it was given, else Kafka's JAAS file in ``KAFKA_OPTS``."""
    return credentials if credentials is not None else credentials_from_environment(environ)


def kazoo_kwargs(credentials: ZkCredentials | None, *, secure: bool = False) -> dict:
    """``KazooClient`` keyword arguments of a client with ``credentials``: ``auth_data``, and with
    ``secure`` a ``default_acl`` of the identity's ALL plus world READ (for znodes outside the open
    roots, such as an exactly-once Spark sink's own records)."""
    if credentials is None:
        return {}
    hide_credentials_in_kazoo_logs()
    kw: dict = {"auth_data": credentials.auth_data}
    if secure:
        kw["default_acl"] = [credentials.owner_acl, WORLD_READ]
    return kw


def tool_security(environ: Mapping[str, str] | None = None) -> dict:
    """A command-line tool's ``--zookeeper`` session (``ZkSession``/``ZkCluster`` keyword arguments):
    the credentials of Kafka's JAAS file in ``KAFKA_OPTS``, and with them the secure ACLs for what
    the tool creates, as Kafka's tools decide (``JaasUtils.isZkSaslEnabled``)."""
    credentials = credentials_from_environment(environ)
    return {"credentials": credentials, "set_acl": credentials is not None}
