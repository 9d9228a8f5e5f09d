"""ACL values and Kafka's authorization rules (pyklog.broker.security.acl), without a server."""

from __future__ import annotations

import pytest

from pyklog.broker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    authorize,
    authorize_by_resource_type,
    operations_bitfield,
    operations_from_bitfield,
)

Op, Perm, RT, PT = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE = "User:alice"


def ace(op=Op.READ, perm=Perm.ALLOW, principal=ALICE, host="*"):
    return AccessControlEntry(principal, host, op, perm)


def topic(name, pt=PT.LITERAL):
    return ResourcePattern(RT.TOPIC, name, pt)


def allowed(index, op, name="orders", principal=ALICE, host="10.0.0.1", rt=RT.TOPIC, **kw):
    return authorize(index, principal, host, op, rt, name, **kw)


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found():
    index = AclIndex()
    assert not allowed(index, Op.READ)
    assert allowed(index, Op.READ, allow_everyone_if_no_acl_found=True)
    # an ACL on the resource for someone else: the flag no longer applies
    index.set(topic("orders"), [ace(principal="User:bob")])
    assert not allowed(index, Op.READ, allow_everyone_if_no_acl_found=True)


def test_allow_then_deny_wins():
    index = AclIndex({topic("orders"): [ace()]})
    assert allowed(index, Op.READ)
    assert not allowed(index, Op.WRITE)
    index.set(topic("orders"), [ace(), ace(perm=Perm.DENY, principal="User:*")])
    assert not allowed(index, Op.READ)


def test_deny_all_beats_allow_and_deny_of_other_op_does_not():
    index = AclIndex({topic("orders"): [ace(Op.ALL), ace(Op.WRITE, Perm.DENY)]})
    assert allowed(index, Op.READ)
    assert allowed(index, Op.DELETE)
    assert not allowed(index, Op.WRITE)
    index.set(topic("orders"), [ace(Op.ALL), ace(Op.ALL, Perm.DENY, host="10.0.0.1")])
    assert not allowed(index, Op.READ)
    assert allowed(index, Op.READ, host="10.0.0.2")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_describe_is_implied(granted):
    index = AclIndex({topic("orders"): [ace(granted)]})
    assert allowed(index, Op.DESCRIBE)
    assert not allowed(index, Op.DESCRIBE_CONFIGS)


def test_describe_configs_implied_by_alter_configs_and_deny_is_not_implied():
    index = AclIndex({topic("orders"): [ace(Op.ALTER_CONFIGS)]})
    assert allowed(index, Op.DESCRIBE_CONFIGS)
    assert not allowed(index, Op.DESCRIBE)
    # a DENY of READ does not deny DESCRIBE
    index.set(topic("orders"), [ace(Op.DESCRIBE), ace(Op.READ, Perm.DENY)])
    assert allowed(index, Op.DESCRIBE)
    assert not allowed(index, Op.READ)


def test_wildcards_principal_host_resource():
    index = AclIndex({topic("*"): [ace(principal="User:*", host="10.0.0.1")]})
    assert allowed(index, Op.READ, name="anything", principal="User:zed")
    assert not allowed(index, Op.READ, name="anything", host="10.0.0.9")
    assert not allowed(index, Op.READ, name="g", rt=RT.GROUP)


def test_prefixed_patterns():
    index = AclIndex({topic("spark-", PT.PREFIXED): [ace()]})
    assert allowed(index, Op.READ, name="spark-out")
    assert allowed(index, Op.READ, name="spark-")
    assert not allowed(index, Op.READ, name="spar")
    assert not allowed(index, Op.READ, name="xspark-out")
    index.set(topic("spark-secret", PT.LITERAL), [ace(perm=Perm.DENY)])
    assert not allowed(index, Op.READ, name="spark-secret")
    index.set(topic("spark-", PT.PREFIXED), [])
    assert not allowed(index, Op.READ, name="spark-out")


def test_super_users_and_principal_names_are_exact():
    index = AclIndex({topic("orders"): [ace(Op.ALL, Perm.DENY, principal="User:*")]})
    assert allowed(index, Op.DELETE, principal="User:admin", super_users=frozenset({"User:admin"}))
    assert not allowed(index, Op.DELETE, principal="User:Admin", super_users=frozenset({"User:admin"}))
    index = AclIndex({topic("orders"): [ace()]})
    assert not allowed(index, Op.READ, principal="User:alice2")


def test_authorize_by_resource_type():
    index = AclIndex()
    kw = {"principal": ALICE, "host": "1.1.1.1", "operation": Op.WRITE, "resource_type": RT.TOPIC}
    assert not authorize_by_resource_type(index, **kw)
    assert authorize_by_resource_type(index, **kw, allow_everyone_if_no_acl_found=True)
    index.set(topic("a"), [ace(Op.WRITE)])
    assert authorize_by_resource_type(index, **kw)
    index.set(topic("a"), [ace(Op.WRITE), ace(Op.WRITE, Perm.DENY)])
    assert not authorize_by_resource_type(index, **kw)
    index.set(topic("p-", PT.PREFIXED), [ace(Op.WRITE)])
    assert authorize_by_resource_type(index, **kw)
    index.set(topic("p", PT.PREFIXED), [ace(Op.WRITE, Perm.DENY)])
    assert not authorize_by_resource_type(index, **kw)
    index.set(topic("p", PT.PREFIXED), [])
    index.set(topic("*"), [ace(Op.ALL, Perm.DENY)])
    assert not authorize_by_resource_type(index, **kw)


def test_filters_select_like_kafka():
    lit, star, pre = topic("orders"), topic("*"), topic("ord", PT.PREFIXED)
    group = ResourcePattern(RT.GROUP, "orders")
    f = ResourcePatternFilter(RT.TOPIC, "orders", PT.MATCH)
    assert [f.matches(p) for p in (lit, star, pre, group)] == [True, True, True, False]
    f = ResourcePatternFilter(RT.ANY, "orders", PT.ANY)
    assert [f.matches(p) for p in (lit, star, pre, group)] == [True, False, False, True]
    f = ResourcePatternFilter(RT.TOPIC, None, PT.PREFIXED)
    assert [f.matches(p) for p in (lit, star, pre, group)] == [False, False, True, False]
    index = AclIndex({lit: [ace(), ace(Op.WRITE, principal="User:bob")], group: [ace()]})
    got = index.bindings(AclBindingFilter(ResourcePatternFilter(), AccessControlEntryFilter(principal="User:bob")))
    assert got == [AclBinding(lit, ace(Op.WRITE, principal="User:bob"))]
    with pytest.raises(ValueError, match="UNKNOWN"):
        AclBindingFilter(ResourcePatternFilter(RT.UNKNOWN)).validate()


def test_binding_validation():
    AclBinding(topic("orders"), ace()).validate()
    AclBinding(ResourcePattern(RT.CLUSTER, "kafka-cluster"), ace(Op.IDEMPOTENT_WRITE)).validate()
    bad = [
        AclBinding(ResourcePattern(RT.CLUSTER, "other"), ace(Op.ALTER)),
        AclBinding(topic(""), ace()),
        AclBinding(topic("x", PT.MATCH), ace()),
        AclBinding(ResourcePattern(RT.GROUP, "g"), ace(Op.WRITE)),
        AclBinding(topic("x"), ace(principal="alice")),
        AclBinding(topic("x"), ace(Op.ANY)),
        AclBinding(topic("a/b"), ace()),
        AclBinding(topic(".."), ace()),
        AclBinding(ResourcePattern(RT.GROUP, "g\x00"), ace()),
    ]
    for b in bad:
        with pytest.raises(ValueError):
            b.validate()


def test_names_and_bitfield():
    assert ResourceType.parse("TransactionalId") is RT.TRANSACTIONAL_ID
    assert ResourceType.parse("TRANSACTIONAL_ID") is RT.TRANSACTIONAL_ID
    assert AclOperation.parse("describe-configs") is Op.DESCRIBE_CONFIGS
    assert Op.IDEMPOTENT_WRITE.kafka_name == "IdempotentWrite"
    assert RT.TOPIC.kafka_name == "Topic"
    # Kafka's bit field: bit 3 READ, bit 8 DESCRIBE
    assert operations_bitfield([Op.READ, Op.DESCRIBE]) == (1 << 3) | (1 << 8)
    assert operations_from_bitfield((1 << 3) | (1 << 8)) == {Op.READ, Op.DESCRIBE}
    assert str(ace()) == "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"


def test_zookeeper_json_is_kafkas():
    from pyklog.broker.zk import paths
    from pyklog.broker.zk.znodes import decode_acl_change, decode_acls, encode_acl_change, encode_acls

    data = encode_acls({ace(Op.IDEMPOTENT_WRITE, Perm.DENY)})
    assert data == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Deny",'
        b'"operation":"IdempotentWrite","host":"*"}]}'
    )
    assert decode_acls(data, "/x") == {ace(Op.IDEMPOTENT_WRITE, Perm.DENY)}
    # Kafka's own writer's spelling (any key order, spaces)
    kafka = b'{"version": 1, "acls": [{"host": "h1", "permissionType": "Allow", "operation": "Read", "principal": "User:bob"}]}'
    assert decode_acls(kafka, "/x") == {AccessControlEntry("User:bob", "h1", Op.READ, Perm.ALLOW)}
    lit, pre = topic("orders"), ResourcePattern(RT.GROUP, "spark-", PT.PREFIXED)
    assert encode_acl_change(lit) == b"TOPIC:orders"
    assert decode_acl_change(b"Topic:orders", "/c", literal=True) == lit
    assert decode_acl_change(encode_acl_change(pre), "/c", literal=False) == pre
    assert paths.acl_resource("PREFIXED", "Group", "spark-") == "/kafka-acl-extended/prefixed/Group/spark-"
    assert paths.acl_resource("LITERAL", "TransactionalId", "t") == "/kafka-acl/TransactionalId/t"
    with pytest.raises(ValueError):
        decode_acls(b'{"version":1,"acls":[{"principal":"User:x"}]}', "/x")
