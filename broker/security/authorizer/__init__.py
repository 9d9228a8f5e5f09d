"""The ACL authorizer (Kafka's ``kafka.security.authorizer``): ACL storage in ZooKeeper
(:mod:`pyklog.broker.zk.acls`), the broker's live cache and decisions
(:mod:`~pyklog.broker.security.authorizer.acl_authorizer`), its settings
(:mod:`~pyklog.broker.security.authorizer_settings`).  The values and rules are
:mod:`pyklog.broker.security.acl`'s."""

from pyklog.broker.security.authorizer.acl_authorizer import AclAuthorizer
from pyklog.broker.security.authorizer_settings import (
    ACL_AUTHORIZER_CLASS_NAMES,
    PYKLOG_AUTHORIZER,
    AuthorizerSettings,
    authorizer_settings,
)
from pyklog.broker.zk.acls import ZkAclStore

__all__ = [
    "ACL_AUTHORIZER_CLASS_NAMES",
    "PYKLOG_AUTHORIZER",
    "AclAuthorizer",
    "AuthorizerSettings",
    "ZkAclStore",
    "authorizer_settings",
]
