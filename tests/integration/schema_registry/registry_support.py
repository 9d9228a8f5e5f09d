"""What the registry's integration tests share: the registry process and one REST call."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from pyklog.connector.schema_registry.process import RegistryProcess

__all__ = ["RegistryProcess", "call"]

CT = "application/vnd.schemaregistry.v1+json"


def call(url: str, method: str, path: str, body=None, timeout: float = 30.0) -> tuple[int, object]:
    """``(status, JSON body)`` of one request to the registry."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": CT})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
