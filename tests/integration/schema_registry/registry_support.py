"""What the registry's integration tests share: the registry process and one REST call."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from pyklog.connector.schema_registry.process import RegistryProcess

__all__ = ["RegistryProcess", "call", "sr_broker"]

CT = "application/vnd.schemaregistry.v1+json"


def call(url: str, method: str, path: str, body=None, timeout: float = 30.0, headers=None) -> tuple[int, object]:
    """``(status, JSON body)`` of one request to the registry."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": CT, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def sr_broker(broker_factory):
    """A broker whose groups form at once (no initial rebalance delay): the registry's election and
    the tests' consumers do not wait 3 s for it."""
    return broker_factory(0, group_initial_rebalance_delay_ms=0)
