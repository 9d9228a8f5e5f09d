"""A small client of the registry's REST API, for pyklog's own code (the Spark typed columns).

:class:`SchemaRegistryClient` looks schemas up by id, the latest (or a given) version of a subject,
registers a schema; answers are cached (ids and versions never change; ``latest`` is cached for
``latest_ttl_s``).  Errors raise :class:`~.errors.SchemaRegistryError` with Confluent's code and
message, and the URL in the message for a registry that cannot be reached (after ``retries``
attempts with a doubling backoff).  Uses only the standard library (urllib), so that executors need
nothing more.  Thread-safe (the caches are guarded by a lock); picklable (the caches are not
pickled).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import quote

from pyklog.connector.schema_registry.errors import SchemaRegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

#: Confluent's subject name strategies (the short names and the Java class names clients configure)
SUBJECT_NAME_STRATEGIES = {
    "TopicNameStrategy": "topic",
    "RecordNameStrategy": "record",
    "TopicRecordNameStrategy": "topic_record",
}


def subject_name(strategy: str, topic: str, is_key: bool, record_name: str | None = None) -> str:
    """The subject a key or value schema is registered under, by Confluent's strategies:
    ``TopicNameStrategy`` (default) ``<topic>-key`` / ``<topic>-value``; ``RecordNameStrategy`` the
    record's full name; ``TopicRecordNameStrategy`` ``<topic>-<record full name>``.  The Java class
    name (``io.confluent.kafka.serializers.subject.RecordNameStrategy``) is accepted too."""
    short = strategy.rsplit(".", 1)[-1] if strategy else "TopicNameStrategy"
    kind = SUBJECT_NAME_STRATEGIES.get(short)
    if kind is None:
        raise ValueError(
            f"unknown subject name strategy {strategy!r}, expected one of {', '.join(SUBJECT_NAME_STRATEGIES)}"
        )
    if kind == "topic":
        return f"{topic}-{'key' if is_key else 'value'}"
    if not record_name:
        raise ValueError(f"{short} needs the record's full name")
    return record_name if kind == "record" else f"{topic}-{record_name}"


class SchemaRegistryClient:
    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        basic_auth: tuple[str, str] | None = None,
        latest_ttl_s: float = 60.0,
        ssl_ca_location: str | None = None,
    ):
        """``basic_auth``: ``(user, password)``; ``ssl_ca_location``: the CAs that sign an https
        registry's certificate (the system's without it)."""
        self.url = url.rstrip("/")
        self.ssl_ca_location = ssl_ca_location
        self.timeout_s = timeout_s
        self.retries = retries
        self._auth = basic_auth
        self.latest_ttl_s = latest_ttl_s
        self._init_caches()

    def _init_caches(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict = {}  # id, or (id, format) -> the answer
        self._versions: dict[tuple[str, int], dict] = {}
        self._latest: dict[str, tuple[float, dict]] = {}
        self._registered: dict[tuple, int] = {}
        self._ssl = ssl.create_default_context(cafile=self.ssl_ca_location) if self.url.startswith("https:") else None

    def __getstate__(self):
        return {
            k: v
            for k, v in self.__dict__.items()
            if k in ("url", "timeout_s", "retries", "_auth", "latest_ttl_s", "ssl_ca_location")
        }

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_caches()

    def __repr__(self) -> str:
        return f"SchemaRegistryClient({self.url!r})"

    def _request(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if self._auth:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{self._auth[0]}:{self._auth[1]}".encode()).decode()
        delay = 0.2
        for attempt in range(self.retries):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl) as resp:
                    return json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as e:
                try:
                    err = json.loads(e.read())
                    code, message = int(err["error_code"]), str(err["message"])
                except (ValueError, KeyError, TypeError):
                    code, message = e.code, f"HTTP {e.code} from {self.url}"
                if e.code >= 500 and attempt + 1 < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise SchemaRegistryError(code, message, status=e.code) from None
            except (urllib.error.URLError, OSError) as e:
                if attempt + 1 < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                reason = getattr(e, "reason", e)
                raise SchemaRegistryError(
                    50003, f"the schema registry at {self.url} cannot be reached: {reason}", status=503
                ) from None
        raise AssertionError("unreachable")

    def get_schema(self, schema_id: int, fmt: str | None = None) -> dict:
        """``{"schema": ..., "schemaType"?: ..., "references"?: [...]}`` of the id; ``fmt="serialized"``
        gives a Protobuf schema as a base64 FileDescriptorProto."""
        key = int(schema_id) if fmt is None else (int(schema_id), fmt)
        with self._lock:
            found = self._by_id.get(key)
        if found is None:
            query = "" if fmt is None else f"?format={quote(fmt, safe='')}"
            found = self._request("GET", f"/schemas/ids/{int(schema_id)}{query}")
            with self._lock:
                self._by_id[key] = found
        return found

    def get_version(self, subject: str, version="latest") -> dict:
        """``{"subject", "version", "id", "schema", ...}``; ``latest`` is cached for latest_ttl_s."""
        now = time.monotonic()
        with self._lock:
            if version == "latest":
                hit = self._latest.get(subject)
                if hit is not None and now - hit[0] < self.latest_ttl_s:
                    return hit[1]
            else:
                cached = self._versions.get((subject, int(version)))
                if cached is not None:
                    return cached
        found = self._request("GET", f"/subjects/{quote(subject, safe='')}/versions/{version}")
        with self._lock:
            self._versions[(subject, int(found["version"]))] = found
            if version == "latest":
                self._latest[subject] = (now, found)
            self._by_id.setdefault(
                int(found["id"]), {k: v for k, v in found.items() if k in ("schema", "schemaType", "references")}
            )
        return found

    def get_latest(self, subject: str) -> dict:
        return self.get_version(subject, "latest")

    def register(self, subject: str, schema: str, schema_type: str = "AVRO", references=None) -> int:
        """The schema's id in ``subject`` (registered when new; 409 SchemaRegistryError if incompatible)."""
        key = (subject, schema, schema_type, json.dumps(references or []))
        with self._lock:
            if key in self._registered:
                return self._registered[key]
        body: dict = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = references
        schema_id = int(self._request("POST", f"/subjects/{quote(subject, safe='')}/versions", body)["id"])
        with self._lock:
            self._registered[key] = schema_id
        return schema_id

    def lookup(self, subject: str, schema: str, schema_type: str = "AVRO", references=None) -> dict:
        """``{"subject", "version", "id", "schema"}`` of ``schema`` (with its ``references``) in
        ``subject`` (40403 / 40401 SchemaRegistryError when it is not registered there); registers
        nothing."""
        body: dict = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = references
        return self._request("POST", f"/subjects/{quote(subject, safe='')}", body)

    def test_compatibility(self, subject: str, schema: str, schema_type: str = "AVRO", version="latest") -> list[str]:
        """The reasons the schema is incompatible with the subject's version (empty: compatible)."""
        body: dict = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        out = self._request(
            "POST", f"/compatibility/subjects/{quote(subject, safe='')}/versions/{version}?verbose=true", body
        )
        return [] if out.get("is_compatible") else list(out.get("messages") or ["incompatible"])
