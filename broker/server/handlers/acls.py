"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): Kafka's ``AclApis`` over the broker's
:class:`~pyklog.broker.security.authorizer.AclAuthorizer`.

* Without an authorizer every one answers SECURITY_DISABLED ("No Authorizer is configured").
* DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on the cluster
  (else CLUSTER_AUTHORIZATION_FAILED for the whole request).
* A filter with UNKNOWN values answers INVALID_REQUEST (DescribeAcls: the whole answer; DeleteAcls:
  that filter); an ACL Kafka refuses (an ANY or MATCH pattern, a CLUSTER resource not named
  ``kafka-cluster``, an empty name, an operation the resource type does not have, a principal not
  written ``User:<name>``) answers INVALID_REQUEST for that creation, the others are made.
* v0 (before pattern types) reads and answers LITERAL patterns only, as Kafka's v0 does.

Request handler threads; the authorizer is thread-safe.
"""

from __future__ import annotations

import logging

from pyklog.broker.errors import InvalidRequestError, PyklogError, SecurityDisabledError
from pyklog.broker.security.acl import (
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
from pyklog.broker.server.handlers.authorization import AuthHelper
from pyklog.broker.server.handlers.responses import NONE, RequestHandlers, outcome_fields

log = logging.getLogger(__name__)

_NO_AUTHORIZER = "No Authorizer is configured."


def _enum(cls, code: int, what: str = ""):
    """A wire code as ``cls`` (an unknown code: UNKNOWN, which the checks refuse)."""
    try:
        return cls(code)
    except ValueError:
        return cls.UNKNOWN


def filter_of(d: dict, version: int) -> AclBindingFilter:
    """A DescribeAcls request / DeleteAcls filter entry -> AclBindingFilter (v0: LITERAL)."""
    pt = PatternType.LITERAL if version == 0 else _enum(PatternType, d.get("pattern_type_filter", 3), "pattern type")
    return AclBindingFilter(
        ResourcePatternFilter(
            _enum(ResourceType, d["resource_type_filter"], "resource type"), d["resource_name_filter"], pt
        ),
        AccessControlEntryFilter(
            d["principal_filter"],
            d["host_filter"],
            _enum(AclOperation, d["operation"], "operation"),
            _enum(AclPermissionType, d["permission_type"], "permission type"),
        ),
    )


def binding_of(d: dict, version: int) -> AclBinding:
    pt = PatternType.LITERAL if version == 0 else _enum(PatternType, d.get("resource_pattern_type", 3), "pattern")
    return AclBinding(
        ResourcePattern(_enum(ResourceType, d["resource_type"], "resource type"), d["resource_name"], pt),
        AccessControlEntry(
            d["principal"],
            d["host"],
            _enum(AclOperation, d["operation"], "operation"),
            _enum(AclPermissionType, d["permission_type"], "permission type"),
        ),
    )


class AclApis(RequestHandlers):
    """The three ACL APIs of one broker; ``auth`` holds the authorizer (or None)."""

    def __init__(self, auth: AuthHelper):
        self.auth = auth

    def handle_describe_acls(self, request, header, body):
        version = header.api_version
        out = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "resources": []}
        try:
            if not self.auth.enabled:
                raise SecurityDisabledError(_NO_AUTHORIZER)
            self.auth.check_cluster(request, AclOperation.DESCRIBE)
            flt = filter_of(body, version)
            try:
                flt.validate()
            except ValueError as e:
                raise InvalidRequestError(str(e)) from None
            by_pattern: dict[ResourcePattern, list] = {}
            for b in self.auth.authorizer.describe_acls(flt):
                if version == 0 and b.pattern.pattern_type != PatternType.LITERAL:
                    continue
                by_pattern.setdefault(b.pattern, []).append(b.entry)
            out["resources"] = [
                {
                    "resource_type": int(p.resource_type),
                    "resource_name": p.name,
                    "pattern_type": int(p.pattern_type),
                    "acls": [
                        {
                            "principal": e.principal,
                            "host": e.host,
                            "operation": int(e.operation),
                            "permission_type": int(e.permission_type),
                        }
                        for e in entries
                    ],
                }
                for p, entries in by_pattern.items()
            ]
        except PyklogError as e:
            out.update(outcome_fields(e))
        self._respond(request, header, out)

    def handle_create_acls(self, request, header, body):
        version = header.api_version
        creations = body["creations"]
        try:
            if not self.auth.enabled:
                raise SecurityDisabledError(_NO_AUTHORIZER)
            self.auth.check_cluster(request, AclOperation.ALTER)
        except PyklogError as e:
            results = [outcome_fields(e) for _ in creations]
        else:
            bindings = [binding_of(c, version) for c in creations]
            results = [outcome_fields(err) for err in self.auth.authorizer.create_acls(bindings)]
            for b, r in zip(bindings, results, strict=True):
                if r["error_code"] == NONE:
                    log.info("%s added ACL %s on %s", request.principal, b.entry, b.pattern)
        self._respond(request, header, {"throttle_time_ms": 0, "results": results})

    def handle_delete_acls(self, request, header, body):
        version = header.api_version
        filters = body["filters"]
        try:
            if not self.auth.enabled:
                raise SecurityDisabledError(_NO_AUTHORIZER)
            self.auth.check_cluster(request, AclOperation.ALTER)
        except PyklogError as e:
            results = [{**outcome_fields(e), "matching_acls": []} for _ in filters]
        else:
            results = []
            for err, removed in self.auth.authorizer.delete_acls([filter_of(f, version) for f in filters]):
                results.append(
                    {
                        **outcome_fields(err),
                        "matching_acls": [
                            {
                                "error_code": NONE,
                                "error_message": None,
                                "resource_type": int(b.pattern.resource_type),
                                "resource_name": b.pattern.name,
                                "pattern_type": int(b.pattern.pattern_type),
                                "principal": b.entry.principal,
                                "host": b.entry.host,
                                "operation": int(b.entry.operation),
                                "permission_type": int(b.entry.permission_type),
                            }
                            for b in removed
                        ],
                    }
                )
                for b in removed:
                    log.info("%s removed ACL %s on %s", request.principal, b.entry, b.pattern)
        self._respond(request, header, {"throttle_time_ms": 0, "filter_results": results})


__all__ = ["AclApis", "binding_of", "filter_of"]
