"""Authentication APIs that reach KafkaApis: SaslHandshake and SaslAuthenticate out of place, and the
SCRAM credential APIs (KIP-554).

* SaslHandshake / SaslAuthenticate are the network layer's business on a SASL listener
  (:mod:`pyklog.broker.security.sasl_server`); one reaching KafkaApis came on a PLAINTEXT listener
  or after authentication without a handshake, and gets ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis``
  answers.
* DescribeUserScramCredentials: every user with a credential (no users named), or the named users
  (RESOURCE_NOT_FOUND for one without, DUPLICATE_RESOURCE for one named twice): mechanisms and
  iterations, never the credential.
* AlterUserScramCredentials: the client sends the salt and the salted password, the broker derives
  the stored and server keys (:meth:`ScramCredential.from_salted_password`) and writes
  ``/config/users/<user>`` (:class:`pyklog.broker.zk.scram_credentials.ZkScramCredentials`); every
  broker applies it through the change notification.  Kafka's checks and errors per user:
  DUPLICATE_RESOURCE (a user and mechanism twice), UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL
  (empty name, iterations outside 4096..16384, empty salt or salted password), RESOURCE_NOT_FOUND
  (deleting a credential that does not exist).

Thread-safe: no state of its own (the ZooKeeper store's writes are versioned).
"""

from __future__ import annotations

import logging

from pyklog.broker.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    IllegalSaslStateError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from pyklog.broker.security.acl import AclOperation
from pyklog.broker.security.scram import BY_TYPE_ID, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from pyklog.broker.server.handlers.authorization import ALLOW_ALL
from pyklog.broker.server.handlers.responses import NONE, RequestHandlers

log = logging.getLogger(__name__)


class SaslApis(RequestHandlers):
    """``store`` is a :class:`~pyklog.broker.zk.scram_credentials.ZkScramCredentials`; ``auth`` the
    broker's authorizer checks (Kafka: DESCRIBE on the cluster to describe credentials, ALTER to
    alter them)."""

    def __init__(self, store, auth=ALLOW_ALL):
        self.store = store
        self.auth = auth

    def handle_sasl_handshake(self, request, header, body):
        self._respond(request, header, {"error_code": IllegalSaslStateError.code, "mechanisms": []})

    def handle_sasl_authenticate(self, request, header, body):
        self._respond(
            request,
            header,
            {
                "error_code": IllegalSaslStateError.code,
                "error_message": "SaslAuthenticate request received without a SaslHandshake on a SASL listener",
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            },
        )

    # ------------------------------------------------------------------ DescribeUserScramCredentials

    def handle_describe_user_scram_credentials(self, request, header, body):
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            self._respond(
                request,
                header,
                {
                    "throttle_time_ms": 0,
                    "error_code": ClusterAuthorizationFailedError.code,
                    "error_message": "Cluster authorization failed.",
                    "results": [],
                },
            )
            return
        names = [u["name"] for u in (body.get("users") or [])]
        results = []
        if not names:
            for user, creds in sorted(self.store.all_credentials().items()):
                results.append(self._described(user, creds))
        else:
            seen: dict[str, int] = {}
            for n in names:
                seen[n] = seen.get(n, 0) + 1
            for n in dict.fromkeys(names):
                if seen[n] > 1:
                    results.append(
                        _user_error(
                            n,
                            DuplicateResourceError.code,
                            f"Cannot describe SCRAM credentials for the same user twice in a single request: {n}",
                        )
                    )
                    continue
                creds = self.store.credentials(n) if n else {}
                if not creds:
                    results.append(
                        _user_error(
                            n,
                            ResourceNotFoundError.code,
                            f"Attempt to describe a user credential that does not exist: {n}",
                        )
                    )
                else:
                    results.append(self._described(n, creds))
        self._respond(
            request, header, {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "results": results}
        )

    @staticmethod
    def _described(user: str, creds) -> dict:
        mech_ids = {m.name: m.type_id for m in BY_TYPE_ID.values()}
        return {
            "user": user,
            "error_code": NONE,
            "error_message": None,
            "credential_infos": [
                {"mechanism": mech_ids[m], "iterations": c.iterations} for m, c in sorted(creds.items())
            ],
        }

    # ------------------------------------------------------------------ AlterUserScramCredentials

    def handle_alter_user_scram_credentials(self, request, header, body):
        deletions = body.get("deletions") or []
        upsertions = body.get("upsertions") or []
        order = list(dict.fromkeys([d["name"] for d in deletions] + [u["name"] for u in upsertions]))
        errors: dict[str, tuple[int, str]] = {}
        if not self.auth.authorize_cluster(request, AclOperation.ALTER):
            denied = {
                "error_code": ClusterAuthorizationFailedError.code,
                "error_message": "Cluster authorization failed.",
            }
            self._respond(request, header, {"throttle_time_ms": 0, "results": [{"user": u, **denied} for u in order]})
            return
        pairs: dict[str, list[int]] = {}
        for e in deletions + upsertions:
            pairs.setdefault(e["name"], []).append(e["mechanism"])
        for user, mechs in pairs.items():
            if len(mechs) != len(set(mechs)):
                errors[user] = (
                    DuplicateResourceError.code,
                    "A user credential cannot be altered twice in the same request",
                )
        for e in deletions + upsertions:
            user = e["name"]
            if user in errors:
                continue
            if not user:
                errors[user] = (UnacceptableCredentialError.code, "Username must not be empty")
            elif e["mechanism"] not in BY_TYPE_ID:
                errors[user] = (UnsupportedSaslMechanismError.code, "Unknown SCRAM mechanism")
        for u in upsertions:
            user = u["name"]
            if user in errors:
                continue
            if u["iterations"] < MIN_ITERATIONS:
                errors[user] = (UnacceptableCredentialError.code, "Too few iterations")
            elif u["iterations"] > MAX_ITERATIONS:
                errors[user] = (UnacceptableCredentialError.code, "Too many iterations")
            elif not u.get("salt") or not u.get("salted_password"):
                errors[user] = (UnacceptableCredentialError.code, "Salt and salted password must not be empty")
        results = []
        for user in order:
            if user not in errors:
                try:
                    self._alter_user(
                        user,
                        [d for d in deletions if d["name"] == user],
                        [u for u in upsertions if u["name"] == user],
                    )
                except ResourceNotFoundError as e:
                    errors[user] = (e.code, str(e))
                except Exception as e:  # noqa: BLE001 - one user's failure is its own answer
                    log.warning("AlterUserScramCredentials of user %s failed: %s", user, type(e).__name__)
                    errors[user] = (-1, f"could not write the credential: {type(e).__name__}")
            code, message = errors.get(user, (NONE, None))
            results.append({"user": user, "error_code": code, "error_message": message})
        self._respond(request, header, {"throttle_time_ms": 0, "results": results})

    def _alter_user(self, user: str, deletions: list, upsertions: list) -> None:
        current = self.store.credentials(user)
        delete_names = []
        for d in deletions:
            name = BY_TYPE_ID[d["mechanism"]].name
            if name not in current:
                raise ResourceNotFoundError("Attempt to delete a user credential that does not exist")
            delete_names.append(name)
        upserts = {}
        for u in upsertions:
            mech = BY_TYPE_ID[u["mechanism"]]
            upserts[mech.name] = ScramCredential.from_salted_password(
                mech, bytes(u["salted_password"]), bytes(u["salt"]), u["iterations"]
            )
        self.store.alter(user, upserts, delete_names)


def _user_error(user: str, code: int, message: str) -> dict:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


def illegal_sasl_state_response(header, body: dict, code: int, message: str):
    """The error response of any request (its API's error body with ``code``), for the SASL
    authenticator's answer to a request that arrives in the middle of an authentication; None
    when that API has no error body (the connection is then closed without an answer)."""
    from pyklog.broker.protocol import ApiKey, encode_response
    from pyklog.broker.server.handlers.responses import error_body

    err = error_body(ApiKey(header.api_key), header.api_version, body, code, message)
    if err is None:
        return None
    return encode_response(header.api_key, header.api_version, header.correlation_id, err)
