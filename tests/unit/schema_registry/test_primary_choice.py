"""The choice of the primary among the group's members (what the group's leader hands out)."""

from __future__ import annotations

from pyklog.connector.schema_registry.election import choose_primary


def members(*urls, ineligible=()):
    return [(f"m-{u}", {"url": u, "eligible": u not in ineligible}) for u in urls]


def test_smallest_eligible_url_then_sticky():
    group = members("http://b:1", "http://a:1", "http://c:1")
    assert choose_primary(group) == {"primary": "http://a:1", "primary_member": "m-http://a:1"}
    # the current primary keeps the role while it is a member, whatever joins
    assert choose_primary(group, current="http://c:1")["primary"] == "http://c:1"
    assert choose_primary(members("http://b:1"), current="http://a:1")["primary"] == "http://b:1"
    assert choose_primary(group, current="http://c:1".replace("c", "z"))["primary"] == "http://a:1"


def test_eligibility():
    group = members("http://a:1", "http://b:1", ineligible=("http://a:1",))
    assert choose_primary(group)["primary"] == "http://b:1"
    assert choose_primary(group, current="http://a:1")["primary"] == "http://b:1"  # no longer eligible
    assert choose_primary(members("http://a:1", ineligible=("http://a:1",))) is None
    assert choose_primary([("m", {"eligible": True})]) is None  # a member without a URL
