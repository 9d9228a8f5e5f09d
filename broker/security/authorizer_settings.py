"""The authorizer's broker settings (Kafka's names), parsed and checked without ZooKeeper.

* ``authorizer.class.name``: empty (the default) = no authorizer, every request allowed; Kafka's
  ``kafka.security.authorizer.AclAuthorizer`` (also the pre-2.4 ``kafka.security.auth.SimpleAclAuthorizer``)
  or pyklog's own :data:`PYKLOG_AUTHORIZER` = the ZooKeeper-backed ACL authorizer.  Anything else is
  a configuration error (pyklog cannot load Java classes).
* ``super.users``: ``User:admin;User:broker`` (semicolon-separated principals) may do anything.
* ``allow.everyone.if.no.acl.found`` (default false): a resource with no ACL at all is open to all.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyklog.broker.errors import ConfigError
from pyklog.broker.security.principal import KafkaPrincipal

PYKLOG_AUTHORIZER = "pyklog.broker.security.authorizer.AclAuthorizer"
ACL_AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        PYKLOG_AUTHORIZER,
    }
)


@dataclass(frozen=True)
class AuthorizerSettings:
    enabled: bool
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool


def authorizer_settings(props: dict[str, str]) -> AuthorizerSettings:
    """The settings of ``props`` (a broker's properties); ConfigError naming the key for bad values."""
    name = (props.get("authorizer.class.name") or "").strip()
    if name and name not in ACL_AUTHORIZER_CLASS_NAMES:
        raise ConfigError(
            f"authorizer.class.name: unknown authorizer {name!r} "
            f"(expected empty or one of {', '.join(sorted(ACL_AUTHORIZER_CLASS_NAMES))})"
        )
    supers = set()
    for item in (props.get("super.users") or "").split(";"):
        item = item.strip()
        if not item:
            continue
        try:
            supers.add(str(KafkaPrincipal.parse(item)))
        except ValueError as e:
            raise ConfigError(f"super.users: {e}") from None
    flag = (props.get("allow.everyone.if.no.acl.found") or "false").strip().lower()
    if flag not in ("true", "false"):
        raise ConfigError(f"allow.everyone.if.no.acl.found: expected true or false, read {flag!r}")
    return AuthorizerSettings(bool(name), frozenset(supers), flag == "true")
