"""The handlers' side of the authorizer (Kafka's ``AuthHelper``): every handler family gets one
:class:`AuthHelper` by constructor and asks it before acting.  Without an authorizer
(``authorizer.class.name`` empty) every check passes, as in Kafka.

The subject of a check is the request's principal (``request.principal``, from its connection) and
host (the peer's address, the ACLs' ``host``).

Thread-safe (the authorizer is; this holds nothing else).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyklog.broker.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    PyklogError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from pyklog.broker.security.acl import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
)

Op = AclOperation
RT = ResourceType

#: the error a denial of each resource type answers (Kafka's AclEntry.authorizationError)
DENIAL_ERRORS: dict[ResourceType, type[PyklogError]] = {
    RT.TOPIC: TopicAuthorizationFailedError,
    RT.GROUP: GroupAuthorizationFailedError,
    RT.CLUSTER: ClusterAuthorizationFailedError,
    RT.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}


def request_host(request) -> str:
    """The peer address of a request (``10.0.0.1:53211`` -> ``10.0.0.1``; IPv6 brackets dropped)."""
    peer = str(getattr(request, "peer", "") or "")
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")


def denial(resource_type: ResourceType, what: str = "") -> PyklogError:
    """The exception a denied check on ``resource_type`` answers with (Kafka's message)."""
    cls = DENIAL_ERRORS[resource_type]
    msgs = {
        RT.TOPIC: "Topic authorization failed.",
        RT.GROUP: "Group authorization failed.",
        RT.CLUSTER: "Cluster authorization failed.",
        RT.TRANSACTIONAL_ID: "Transactional Id authorization failed.",
    }
    return cls(msgs[resource_type] + (f" ({what})" if what else ""))


class AuthHelper:
    """The checks the handlers make.  ``authorizer``: an
    :class:`~pyklog.broker.security.authorizer.AclAuthorizer` or None (everything allowed)."""

    def __init__(self, authorizer=None):
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def authorize(
        self, request, op: AclOperation, resource_type: ResourceType, name: str, *, log_if_denied: bool = True
    ) -> bool:
        a = self.authorizer
        if a is None:
            return True
        return a.authorize(
            request.principal, request_host(request), op, resource_type, name, log_if_denied=log_if_denied
        )

    def authorize_cluster(self, request, op: AclOperation, *, log_if_denied: bool = True) -> bool:
        return self.authorize(request, op, RT.CLUSTER, CLUSTER_NAME, log_if_denied=log_if_denied)

    def check_cluster(self, request, op: AclOperation) -> None:
        """ClusterAuthorizationFailedError unless the cluster operation is allowed (Kafka's
        ``authorizeClusterOperation``: the whole request fails)."""
        if not self.authorize_cluster(request, op):
            raise denial(RT.CLUSTER, f"{op.name} on the cluster")

    def filter_authorized(
        self, request, op: AclOperation, resource_type: ResourceType, names: Iterable[str]
    ) -> set[str]:
        """The distinct ``names`` the principal may ``op`` (each checked once)."""
        return {n for n in set(names) if self.authorize(request, op, resource_type, n)}

    def authorize_by_resource_type(self, request, op: AclOperation, resource_type: ResourceType) -> bool:
        a = self.authorizer
        if a is None:
            return True
        return a.authorize_by_resource_type(request.principal, request_host(request), op, resource_type)

    def authorized_operations(self, request, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations bit field of a resource for the request's principal (without
        an authorizer: every supported operation, as Kafka answers)."""
        a = self.authorizer
        if a is None:
            from pyklog.broker.security.acl import SUPPORTED_OPERATIONS, operations_bitfield

            return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
        return a.authorized_operations(request.principal, request_host(request), resource_type, name)


#: no authorizer: every check passes
ALLOW_ALL = AuthHelper(None)

__all__ = ["ALLOW_ALL", "AUTHORIZED_OPERATIONS_OMITTED", "AuthHelper", "DENIAL_ERRORS", "denial", "request_host"]
