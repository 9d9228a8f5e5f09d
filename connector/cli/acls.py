"""``pyklog-acls``: add, remove and list ACLs through the brokers (Kafka's kafka-acls.sh, AclCommand,
with ``--bootstrap-server``), with Kafka's flags and output::

    pyklog-acls --bootstrap-server HOST:PORT --add --allow-principal User:alice --operation Read --topic orders
    pyklog-acls --bootstrap-server HOST:PORT --add --allow-principal User:spark --consumer --topic orders --group spark-
        --resource-pattern-type prefixed
    pyklog-acls --bootstrap-server HOST:PORT --add --allow-principal User:app --producer --topic out
        --transactional-id app- --resource-pattern-type prefixed
    pyklog-acls --bootstrap-server HOST:PORT --remove --allow-principal User:alice --operation Read --topic orders --force
    pyklog-acls --bootstrap-server HOST:PORT --list [--topic orders] [--principal User:alice]

* Resources: ``--topic`` and ``--group`` and ``--transactional-id`` (repeatable), ``--cluster``;
  ``--resource-pattern-type`` LITERAL (default), PREFIXED, and for ``--list`` / ``--remove`` also ANY
  and MATCH (the patterns that apply to the named resource).
* Entries: ``--allow-principal`` / ``--deny-principal`` (repeatable, ``User:<name>``, ``User:*``),
  ``--allow-host`` / ``--deny-host`` (default ``*``), ``--operation`` (repeatable, default All).
* ``--producer``: WRITE, DESCRIBE, CREATE on the topics; WRITE, DESCRIBE on the transactional ids;
  with ``--idempotent`` IDEMPOTENT_WRITE on the cluster.  ``--consumer``: READ, DESCRIBE on the
  topics and READ on the group (``--group`` required).
* ``--remove`` asks ``(y/n)`` on stdin for each resource unless ``--force``.
* ``--command-config FILE``: the client's properties (security settings), as Kafka's tools.
* ``--authorizer-properties zookeeper.connect=HOST:PORT/chroot`` instead of ``--bootstrap-server``:
  the ACLs are read and written in ZooKeeper directly (Kafka's ZooKeeper mode of the tool), e.g. to
  grant the first administrator before any principal may alter ACLs through a broker.

Output as Kafka's (a space, then a tab before each entry)::

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
      <TAB>(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
      <TAB>(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

Exit codes: 0 done, 1 bad options or a failed call (``Error: ...`` on stderr, e.g.
CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED when the brokers have no authorizer).
"""

from __future__ import annotations

import argparse
import sys

from pyklog.broker.common.cli import UsageError, reports_errors, require, tool_parser
from pyklog.broker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from pyklog.broker.security.principal import KafkaPrincipal
from pyklog.connector.cli import add_command_config, client_security, parse_properties, setup_logging

Op = AclOperation


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-acls",
        "Add, remove and list ACLs (Kafka's kafka-acls.sh).",
        "examples:\n"
        "  pyklog-acls --bootstrap-server localhost:9092 --add --allow-principal User:alice "
        "--operation Read --topic orders\n"
        "  pyklog-acls --bootstrap-server localhost:9092 --add --allow-principal User:spark --consumer "
        "--topic events --group spark-query\n"
        "  pyklog-acls --bootstrap-server localhost:9092 --list --topic orders",
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the brokers (or --authorizer-properties)")
    p.add_argument(
        "--authorizer-properties",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="zookeeper.connect=HOST:PORT[/chroot]: read and write the ACLs in ZooKeeper directly, without a "
        "broker (Kafka's ZooKeeper mode of kafka-acls.sh)",
    )
    add_command_config(p)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--principal", action="append", default=[], help="--list: only the ACLs of this principal")
    p.add_argument("--operation", action="append", default=[], metavar="OP", help="Read, Write, ... (default All)")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="LITERAL", help="LITERAL (default), PREFIXED, ANY, MATCH")
    p.add_argument("--producer", action="store_true", help="the ACLs of a producer")
    p.add_argument("--consumer", action="store_true", help="the ACLs of a consumer (needs --group)")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    return p


def _pattern_type(text: str, action: str) -> PatternType:
    try:
        pt = PatternType.parse(text)
    except ValueError:
        raise UsageError(f"--resource-pattern-type: expected LITERAL, PREFIXED, ANY or MATCH, read {text!r}") from None
    if pt == PatternType.UNKNOWN or (action == "add" and pt not in (PatternType.LITERAL, PatternType.PREFIXED)):
        raise UsageError(f"A '--resource-pattern-type' value of '{pt.name}' is not valid when adding acls.")
    return pt


def _principals(values) -> list[str]:
    out = []
    for v in values:
        try:
            out.append(str(KafkaPrincipal.parse(v.strip())))
        except ValueError as e:
            raise UsageError(str(e)) from None
    return out


def _resources(a, pt: PatternType) -> list[tuple[ResourceType, str]]:
    """(type, name) of every resource the options name (the cluster only with LITERAL, as Kafka)."""
    res = [(ResourceType.TOPIC, t.strip()) for t in a.topic]
    if pt == PatternType.LITERAL and (a.cluster or a.idempotent):
        res.append((ResourceType.CLUSTER, CLUSTER_NAME))
    res += [(ResourceType.GROUP, g.strip()) for g in a.group]
    res += [(ResourceType.TRANSACTIONAL_ID, t) for t in a.transactional_id]
    return list(dict.fromkeys(res))


def _entries(a, operations) -> list[AccessControlEntry]:
    out = []
    for principals, hosts, perm in (
        (_principals(a.allow_principal), a.allow_host, AclPermissionType.ALLOW),
        (_principals(a.deny_principal), a.deny_host, AclPermissionType.DENY),
    ):
        hosts = [h.strip() for h in hosts] or ([WILDCARD_HOST] if principals else [])
        out += [AccessControlEntry(p, h, op, perm) for p in principals for op in operations for h in hosts]
    return out


def _operations(a) -> list[AclOperation]:
    try:
        ops = [AclOperation.parse(o) for o in a.operation] or [Op.ALL]
    except ValueError as e:
        raise UsageError(str(e)) from None
    if any(o in (Op.ANY, Op.UNKNOWN) for o in ops):
        raise UsageError("--operation: ANY and UNKNOWN are not operations an ACL can name")
    return ops


def bindings_to_add(a) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """What ``--add`` (or ``--remove``) names: resource pattern -> entries, with the
    ``--producer`` / ``--consumer`` conveniences expanded as Kafka's AclCommand does."""
    action = "add" if a.add else "remove"
    pt = _pattern_type(a.resource_pattern_type, action)
    if not (a.allow_principal or a.deny_principal) and action == "add":
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}
    if a.producer or a.consumer:
        if a.consumer and not a.group:
            raise UsageError("With --consumer you must specify a --group")
        if a.producer and not (a.topic or a.transactional_id):
            raise UsageError("With --producer you must specify a --topic or --transactional-id")
        for t in a.topic:
            ops = ([Op.WRITE, Op.DESCRIBE, Op.CREATE] if a.producer else []) + (
                [Op.READ, Op.DESCRIBE] if a.consumer else []
            )
            out[ResourcePattern(ResourceType.TOPIC, t.strip(), pt)] = _entries(a, list(dict.fromkeys(ops)))
        if a.consumer:
            for g in a.group:
                out[ResourcePattern(ResourceType.GROUP, g.strip(), pt)] = _entries(a, [Op.READ])
        if a.producer:
            for tid in a.transactional_id:
                out[ResourcePattern(ResourceType.TRANSACTIONAL_ID, tid, pt)] = _entries(a, [Op.WRITE, Op.DESCRIBE])
            if a.idempotent:
                out[ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)] = _entries(a, [Op.IDEMPOTENT_WRITE])
        return out
    resources = _resources(a, pt)
    if not resources:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
            "or --transactional-id <id>"
        )
    ops = _operations(a)
    for rtype, name in resources:
        bad = [o.name for o in ops if o != Op.ALL and o not in SUPPORTED_OPERATIONS[rtype]]
        if bad:
            raise UsageError(
                f"ResourceType {rtype.kafka_name} only supports operations "
                f"{', '.join(sorted(o.kafka_name for o in SUPPORTED_OPERATIONS[rtype]))},All (read {', '.join(bad)})"
            )
        out[ResourcePattern(rtype, name, pt)] = _entries(a, ops)
    return out


def _filter_str(f: ResourcePatternFilter) -> str:
    return f"ResourcePattern(resourceType={f.resource_type.name}, name={f.name}, patternType={f.pattern_type.name})"


def _print_acls(header: str, pattern_text: str, entries) -> None:
    lines = "\n".join("\t" + str(e) for e in entries)
    print(f"{header} `{pattern_text}`: \n {lines} \n")


def _confirm(a, message: str) -> bool:
    if a.force:
        return True
    print(message)
    line = sys.stdin.readline()
    return line.strip().lower() == "y"


def list_acls(admin, a) -> None:
    pt = PatternType.parse(a.resource_pattern_type) if a.resource_pattern_type else PatternType.LITERAL
    resources = _resources(a, pt)
    filters = [AclBindingFilter(ResourcePatternFilter(rt, name, pt)) for rt, name in resources] or [AclBindingFilter()]
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for flt in filters:
        for b in admin.describe_acls(flt):
            by_pattern.setdefault(b.pattern, [])
            if b.entry not in by_pattern[b.pattern]:
                by_pattern[b.pattern].append(b.entry)
    principals = _principals(a.principal)
    groups = [(None, by_pattern)] if not principals else []
    for p in principals:
        groups.append((p, {k: [e for e in v if e.principal == p] for k, v in by_pattern.items()}))
    for p, mapping in groups:
        if p is not None:
            print(f"ACLs for principal `{p}`")
        for pattern, entries in sorted(mapping.items()):
            if entries:
                _print_acls("Current ACLs for resource", str(pattern), entries)


class ZooKeeperAclAdmin:
    """``--authorizer-properties zookeeper.connect=...``: the ACL calls of :class:`AdminClient` made
    on ZooKeeper directly, with the brokers' ACL store (Kafka's layout, versioned writes, change
    notifications: running brokers follow).  How the first ACLs of a cluster are written before any
    principal may alter them through a broker."""

    def __init__(self, zk_connect: str):
        from pyklog.broker.zk.acls import ZkAclStore
        from pyklog.broker.zk.session import ZkSession

        self.session = ZkSession(zk_connect, session_timeout_s=18.0, connect_timeout_s=15, registering=False)
        self.session.start()
        self.store = ZkAclStore(self.session.zk)
        self.store.ensure_paths()

    def close(self) -> None:
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def create_acls(self, bindings) -> list:
        from pyklog.broker.errors import InvalidRequestError

        out: list = []
        valid = []
        for b in bindings:
            try:
                b.validate()
                out.append(None)
                valid.append(b)
            except ValueError as e:
                out.append(InvalidRequestError(str(e)))
        self.store.add(valid)
        return out

    def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        flt_check(flt)
        return self.store.load_all().bindings(flt)

    def delete_acls(self, filters) -> list[list[AclBinding]]:
        out = []
        for flt in filters:
            flt_check(flt)
            matched = self.store.load_all().bindings(flt)
            self.store.remove(matched)
            out.append(matched)
        return out


def flt_check(flt: AclBindingFilter) -> None:
    try:
        flt.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _admin(a):
    """The ACL calls' target: the brokers (``--bootstrap-server``) or ZooKeeper
    (``--authorizer-properties zookeeper.connect=...``)."""
    if a.authorizer_properties:
        props = parse_properties(a.authorizer_properties, "--authorizer-properties")
        zk = props.get("zookeeper.connect", "").strip()
        if not zk:
            raise UsageError("--authorizer-properties: zookeeper.connect=HOST:PORT[/chroot] is required")
        if a.bootstrap_server:
            raise UsageError("Only one of --bootstrap-server or --authorizer-properties must be specified")
        return ZooKeeperAclAdmin(zk)
    require(a, "bootstrap-server")
    from pyklog.connector.admin import AdminClient

    return AdminClient(
        a.bootstrap_server,
        client_id="pyklog-acls",
        request_timeout_ms=30000,
        security=client_security(a.command_config),
    )


@reports_errors()
def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)
    if not (a.add or a.remove or a.list):
        raise UsageError("Command must include exactly one action: --list, --add, --remove.")
    client_security(a.command_config)  # read now: a missing file is a usage error

    with _admin(a) as admin:
        if a.list:
            list_acls(admin, a)
            return 0
        if a.add:
            for pattern, entries in bindings_to_add(a).items():
                _print_acls("Adding ACLs for resource", str(pattern), entries)
                errors = [e for e in admin.create_acls([AclBinding(pattern, e) for e in entries]) if e is not None]
                if errors:
                    raise errors[0]
            return 0
        # --remove: the named entries, or (no principal given) every ACL of each resource
        pt = _pattern_type(a.resource_pattern_type, "remove")
        if a.allow_principal or a.deny_principal or a.producer or a.consumer:
            for pattern, entries in bindings_to_add(a).items():
                rf = ResourcePatternFilter(pattern.resource_type, pattern.name, pt)
                lines = "\n".join("\t" + str(e) for e in entries)
                if _confirm(
                    a,
                    f"Are you sure you want to remove ACLs: \n {lines} \n from resource filter `{_filter_str(rf)}`? (y/n)",
                ):
                    admin.delete_acls(
                        [
                            AclBindingFilter(
                                rf, AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission_type)
                            )
                            for e in entries
                        ]
                    )
        else:
            resources = _resources(a, pt)
            if not resources:
                raise UsageError(
                    "You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                    "or --transactional-id <id>"
                )
            for rtype, name in resources:
                rf = ResourcePatternFilter(rtype, name, pt)
                if _confirm(
                    a, f"Are you sure you want to delete all ACLs for resource filter `{_filter_str(rf)}`? (y/n)"
                ):
                    admin.delete_acls([AclBindingFilter(rf)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
