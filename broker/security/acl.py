"""ACL values and their matching: Kafka's ``org.apache.kafka.common.acl`` / ``.resource`` and the
decision rules of its ``AclAuthorizer`` (ZooKeeper mode), as pure values and functions.

* :class:`ResourceType`, :class:`PatternType`, :class:`AclOperation`, :class:`AclPermissionType`:
  Kafka's enums with Kafka's wire codes (the CreateAcls / DescribeAcls / DeleteAcls ``int8`` fields)
  and Kafka's names (``Topic``, ``Read``, ``Allow``: the ZooKeeper JSON's and the tools' spelling).
* :class:`ResourcePattern` (type, name, LITERAL or PREFIXED), :class:`AccessControlEntry` (principal,
  host, operation, permission) and :class:`AclBinding` (the two together); :class:`AclBindingFilter`
  (with ANY / MATCH / null wildcards) selects bindings for DescribeAcls and DeleteAcls.
* :func:`authorize`: the decision for one principal, host, operation and resource, given the ACLs of
  the resource patterns that match it (:meth:`AclIndex.matching`).  Kafka's rules: a ``super.users``
  principal may do anything; with no ACL on the resource ``allow.everyone.if.no.acl.found`` decides;
  a matching DENY beats any ALLOW; an ACL matches a principal by name or ``User:*``, a host by
  address or ``*``, an operation exactly or by ALL; an ALLOW of READ, WRITE, DELETE or ALTER also
  allows DESCRIBE, and of ALTER_CONFIGS also DESCRIBE_CONFIGS (never for a DENY).  The ACLs of a
  resource are those of its LITERAL name, of the LITERAL ``*`` of its type, and of every PREFIXED
  pattern its name starts with.

Thread-safety: the values are immutable; an :class:`AclIndex` is not locked: its owner swaps in a
new one (copy on write) or guards it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyklog.broker.security.principal import KafkaPrincipal

#: the name of the one CLUSTER resource (Kafka's ``Resource.CLUSTER_NAME``)
CLUSTER_NAME = "kafka-cluster"
#: LITERAL resource name matching every resource of its type; principal and host wildcards
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
#: the authorized-operations fields' value when the client did not ask (Integer.MIN_VALUE)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Named(enum.IntEnum):
    """An enum with Kafka's wire code as value and Kafka's PascalCase name (``TransactionalId``)."""

    @property
    def kafka_name(self) -> str:
        return _pascal(self.name)

    @classmethod
    def parse(cls, text: str):
        """Kafka's ``SecurityUtils`` lookup: the PascalCase name, or any case with or without
        underscores (``Topic``, ``TOPIC``, ``transactional_id``, ``TransactionalId``)."""
        key = text.strip().replace("-", "_").upper()
        for member in cls:
            if key in (member.name, member.name.replace("_", "")):
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}: expected one of {[m.kafka_name for m in cls]}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: the resource types an ACL may name (not UNKNOWN / ANY)
CONCRETE_RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}

Op = AclOperation
#: Kafka 3.7's ``AclEntry.supportedOperations``: what an ACL on each resource type may name (and
#: what the authorized-operations fields report), ALL aside
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            Op.CREATE,
            Op.CLUSTER_ACTION,
            Op.DESCRIBE_CONFIGS,
            Op.ALTER_CONFIGS,
            Op.IDEMPOTENT_WRITE,
            Op.ALTER,
            Op.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}

#: an ALLOW of any of these operations also allows the key (Kafka's implied operations)
_ALLOWED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}


def allowing_operations(op: AclOperation) -> frozenset[AclOperation]:
    """The ACL operations whose ALLOW allows ``op`` (ALL aside): ``op`` and what implies it."""
    return _ALLOWED_BY.get(op, frozenset({op}))


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """A resource pattern an ACL names: ``TOPIC`` ``orders`` LITERAL, ``GROUP`` ``spark-`` PREFIXED,
    ``TOPIC`` ``*`` LITERAL (every topic), ``CLUSTER`` ``kafka-cluster`` LITERAL."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        # Kafka's ResourcePattern.toString
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )

    def validate(self) -> None:
        """ValueError unless an ACL may name this pattern (Kafka's CreateAcls checks)."""
        if self.resource_type not in CONCRETE_RESOURCE_TYPES:
            raise ValueError(f"invalid resource type {self.resource_type.name} for an ACL")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"invalid pattern type {self.pattern_type.name} for an ACL: LITERAL or PREFIXED")
        if not self.name:
            raise ValueError("Invalid empty resource name")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise ValueError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if "/" in self.name or "\x00" in self.name or self.name in (".", ".."):
            # the name is a znode's name: ZooKeeper cannot hold these (nor can Kafka's store)
            raise ValueError(f"a resource name may not contain '/' or NUL, nor be '.' or '..': {self.name!r}")


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """Who (``principal`` ``User:alice``, ``User:*``), from where (``host`` address or ``*``), may or
    may not (``permission_type``) do what (``operation``)."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        # kafka-acls.sh's line: "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )

    def validate(self, resource_type: ResourceType | None = None) -> None:
        """ValueError unless an ACL may hold this entry (on ``resource_type`` when given)."""
        KafkaPrincipal.parse(self.principal)
        if not self.host:
            raise ValueError("an ACL's host is an address or '*'")
        if self.operation in (Op.UNKNOWN, Op.ANY):
            raise ValueError(f"invalid operation {self.operation.name} for an ACL")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise ValueError(f"invalid permission type {self.permission_type.name} for an ACL")
        if (
            resource_type is not None
            and self.operation != Op.ALL
            and self.operation not in SUPPORTED_OPERATIONS.get(resource_type, ())
        ):
            raise ValueError(
                f"operation {self.operation.name} is not valid on a {resource_type.name} resource "
                f"(valid: {sorted(o.name for o in SUPPORTED_OPERATIONS.get(resource_type, ()))} or ALL)"
            )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate(self.pattern.resource_type)


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Selects resource patterns: ``resource_type`` ANY, ``name`` None and ``pattern_type`` ANY match
    everything; ``pattern_type`` MATCH selects the patterns that would apply to the resource
    ``name`` (its LITERAL name, the LITERAL ``*``, the PREFIXED patterns it starts with)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)  # PREFIXED

    def find_indefinite_field(self) -> str | None:
        """Why this filter cannot select anything (UNKNOWN values), or None."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Selects entries: None / ANY fields match everything."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation == Op.ANY or self.operation == entry.operation)
            and (self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type)
        )

    def find_indefinite_field(self) -> str | None:
        if self.operation == Op.UNKNOWN:
            return "Operation is UNKNOWN."
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects ACLs (DescribeAcls, DeleteAcls): a pattern filter and an entry filter."""

    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def validate(self) -> None:
        """ValueError for a filter Kafka refuses (INVALID_REQUEST): UNKNOWN values."""
        why = self.pattern.find_indefinite_field() or self.entry.find_indefinite_field()
        if why is not None:
            raise ValueError(why)


#: the filter selecting every ACL
ANY_ACL = AclBindingFilter()


class AclIndex:
    """The ACLs of a cluster by resource pattern, as the authorizer caches them.  Not locked: the
    authorizer replaces whole entries under its own lock and readers see a consistent dict entry."""

    def __init__(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]] | None = None):
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        #: resource type -> the PREFIXED pattern names (a small list: prefixes are few)
        self._prefixes: dict[ResourceType, set[str]] = {}
        for pattern, entries in (acls or {}).items():
            self.set(pattern, entries)

    def set(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """The ACLs of ``pattern`` are ``entries`` (none: the pattern is forgotten)."""
        entries = frozenset(entries)
        if entries:
            self._acls[pattern] = entries
            if pattern.pattern_type == PatternType.PREFIXED:
                self._prefixes.setdefault(pattern.resource_type, set()).add(pattern.name)
        else:
            self._acls.pop(pattern, None)
            if pattern.pattern_type == PatternType.PREFIXED:
                self._prefixes.get(pattern.resource_type, set()).discard(pattern.name)

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        return sorted(self._acls)

    def bindings(self, flt: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """Every ACL ``flt`` selects, sorted."""
        out = []
        for pattern, entries in list(self._acls.items()):
            if flt.pattern.matches(pattern):
                out.extend(AclBinding(pattern, e) for e in entries if flt.entry.matches(e))
        return sorted(out)

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The ACLs that apply to the resource ``name`` of ``resource_type``: its LITERAL name, the
        LITERAL ``*`` and every PREFIXED pattern ``name`` starts with."""
        out: list[AccessControlEntry] = []
        out.extend(self._acls.get(ResourcePattern(resource_type, name, PatternType.LITERAL), ()))
        if name != WILDCARD_RESOURCE:
            out.extend(self._acls.get(ResourcePattern(resource_type, WILDCARD_RESOURCE, PatternType.LITERAL), ()))
        for prefix in list(self._prefixes.get(resource_type, ())):
            if name.startswith(prefix):
                out.extend(self._acls.get(ResourcePattern(resource_type, prefix, PatternType.PREFIXED), ()))
        return out

    def has_acls_of_type(self, resource_type: ResourceType) -> bool:
        return any(p.resource_type == resource_type for p in list(self._acls))

    def __len__(self) -> int:
        return sum(len(e) for e in self._acls.values())


def _entry_applies(entry: AccessControlEntry, principal: str, host: str) -> bool:
    return entry.principal in (principal, WILDCARD_PRINCIPAL) and entry.host in (host, WILDCARD_HOST)


def decide(
    acls: Iterable[AccessControlEntry],
    principal: str,
    host: str,
    operation: AclOperation,
    *,
    allow_if_no_acls: bool = False,
) -> bool:
    """Kafka's ``AclAuthorizer.aclsAllowAccess`` on the ACLs matching a resource: no ACL at all ->
    ``allow_if_no_acls``; a DENY of ``operation`` (or ALL) for the principal (or ``User:*``) and
    host (or ``*``) -> False; else an ALLOW of ``operation``, of an operation implying it, or of ALL
    -> True; else False."""
    acls = list(acls)
    if not acls:
        return allow_if_no_acls
    for e in acls:
        if (
            e.permission_type == AclPermissionType.DENY
            and e.operation in (operation, Op.ALL)
            and _entry_applies(e, principal, host)
        ):
            return False
    allowing = allowing_operations(operation)
    return any(
        e.permission_type == AclPermissionType.ALLOW
        and (e.operation in allowing or e.operation == Op.ALL)
        and _entry_applies(e, principal, host)
        for e in acls
    )


def authorize(
    index: AclIndex,
    principal: KafkaPrincipal | str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_everyone_if_no_acl_found: bool = False,
) -> bool:
    """The decision for one action (see the module's rules)."""
    p = str(principal)
    if p in super_users:
        return True
    return decide(
        index.matching(resource_type, name), p, host, operation, allow_if_no_acls=allow_everyone_if_no_acl_found
    )


def authorize_by_resource_type(
    index: AclIndex,
    principal: KafkaPrincipal | str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_everyone_if_no_acl_found: bool = False,
) -> bool:
    """KIP-679's ``authorizeByResourceType``: may the principal do ``operation`` on at least one
    resource of ``resource_type``?  Yes when an ALLOW (exact operation or ALL) for the principal and
    host names a LITERAL resource or PREFIXED pattern that no DENY covers (a DENY on the LITERAL
    ``*`` covers everything; a DENY on a LITERAL name covers that name; a DENY on a PREFIXED pattern
    covers the names and prefixes it starts)."""
    p = str(principal)
    if p in super_users:
        return True
    deny_literal: set[str] = set()
    deny_prefix: set[str] = set()
    allow_literal: set[str] = set()
    allow_prefix: set[str] = set()
    for pattern in index.patterns():
        if pattern.resource_type != resource_type:
            continue
        for e in index.get(pattern):
            if e.operation not in (operation, Op.ALL) or not _entry_applies(e, p, host):
                continue
            deny = e.permission_type == AclPermissionType.DENY
            literal = pattern.pattern_type == PatternType.LITERAL
            (
                deny_literal
                if deny and literal
                else deny_prefix
                if deny
                else allow_literal
                if literal
                else allow_prefix
            ).add(pattern.name)
    if WILDCARD_RESOURCE in deny_literal:
        return False
    if not index.has_acls_of_type(resource_type):
        return allow_everyone_if_no_acl_found

    def denied_by_prefix(name: str) -> bool:
        return any(name.startswith(d) for d in deny_prefix)

    for name in allow_prefix:
        if not denied_by_prefix(name):
            return True
    for name in allow_literal:
        if name == WILDCARD_RESOURCE or (name not in deny_literal and not denied_by_prefix(name)):
            return True
    return False


def operations_bitfield(ops: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation (the authorized-operations
    fields of Metadata, DescribeCluster and DescribeGroups), as a signed int32."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def operations_from_bitfield(bits: int) -> set[AclOperation]:
    """The operations a bit field holds (the client's side of :func:`operations_bitfield`)."""
    if bits == AUTHORIZED_OPERATIONS_OMITTED:
        return set()
    bits &= 0xFFFFFFFF
    return {op for op in AclOperation if bits & (1 << int(op))}


__all__ = [
    "ANY_ACL",
    "AUTHORIZED_OPERATIONS_OMITTED",
    "CLUSTER_NAME",
    "CONCRETE_RESOURCE_TYPES",
    "SUPPORTED_OPERATIONS",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclIndex",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "allowing_operations",
    "authorize",
    "authorize_by_resource_type",
    "decide",
    "operations_bitfield",
    "operations_from_bitfield",
]
