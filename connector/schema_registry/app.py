"""The HTTP side: Confluent Schema Registry's REST API on aiohttp.

Every handler reads the body as JSON (any content type; clients send
``application/vnd.schemaregistry.v1+json``), runs the registry call on a worker thread (writes wait
for the cluster) and answers JSON with Confluent's content type, or Confluent's error body
``{"error_code": ..., "message": ...}``.  On an instance that is not the primary, the writes (POST
of a version, DELETE, PUT of a config) are forwarded to the primary as they came and its answer is
returned; while no primary is known (an election in progress) a write waits for one up to
``kafkastore.timeout.ms``, then fails with 50003.

Runs on the server's event loop; the registry calls run in the loop's default executor.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import ssl
from functools import partial

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from pyklog.connector.schema_registry import errors, protobuf
from pyklog.connector.schema_registry.compatibility import SCHEMA_TYPES
from pyklog.connector.schema_registry.config import password_matches
from pyklog.connector.schema_registry.registry import SchemaRegistry

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: marks a write one instance forwarded to another (a write is forwarded at most once)
FORWARDED_HEADER = "X-Pyklog-Forwarded"


def _json(value, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(value), status=status, content_type=CONTENT_TYPE)


def _formatted(request: web.Request, schema_type: str, text: str) -> str:
    """The schema in the form ``?format=`` asks for: a Protobuf schema as ``.proto`` text by default
    (one registered as a base64 descriptor is rendered), as a base64 FileDescriptorProto with
    ``serialized`` (what confluent-kafka's Python deserializer reads)."""
    if schema_type != "PROTOBUF":
        return text
    try:
        if request.query.get("format") == "serialized":
            return base64.b64encode(protobuf.to_descriptor(text)).decode()
        return protobuf.to_text(text)
    except protobuf.ProtobufSchemaError as e:
        raise errors.invalid_schema(str(e)) from None


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


#: Confluent Schema Registry's routes: (method, path under the root, handler name)
ROUTES = (
    ("GET", "", "root"),
    ("GET", "subjects", "list_subjects"),
    ("GET", "subjects/{subject}/versions", "list_versions"),
    ("POST", "subjects/{subject}/versions", "register"),
    ("GET", "subjects/{subject}/versions/{version}", "get_version"),
    ("GET", "subjects/{subject}/versions/{version}/schema", "get_version_schema"),
    ("GET", "subjects/{subject}/versions/{version}/referencedby", "referenced_by"),
    ("DELETE", "subjects/{subject}/versions/{version}", "delete_version"),
    ("POST", "subjects/{subject}", "lookup"),
    ("DELETE", "subjects/{subject}", "delete_subject"),
    ("GET", "schemas", "list_schemas"),
    ("GET", "schemas/types", "schema_types"),
    ("GET", "schemas/ids/{id}", "get_schema"),
    ("GET", "schemas/ids/{id}/schema", "get_schema_text"),
    ("GET", "schemas/ids/{id}/versions", "get_schema_versions"),
    ("GET", "schemas/ids/{id}/subjects", "get_schema_subjects"),
    ("GET", "config", "get_config"),
    ("PUT", "config", "put_config"),
    ("DELETE", "config", "delete_config"),
    ("GET", "config/{subject}", "get_config"),
    ("PUT", "config/{subject}", "put_config"),
    ("DELETE", "config/{subject}", "delete_config"),
    ("POST", "compatibility/subjects/{subject}/versions/{version}", "compatibility"),
    ("POST", "compatibility/subjects/{subject}/versions", "compatibility"),
    ("GET", "mode", "get_mode"),
    ("GET", "mode/{subject}", "get_mode"),
    ("PUT", "mode", "put_mode"),
    ("PUT", "mode/{subject}", "put_mode"),
    ("GET", "contexts", "contexts"),
    ("GET", "v1/metadata/id", "metadata_id"),
)


class AlwaysPrimary:
    """The election of a single instance: this one."""

    def __init__(self, url: str = ""):
        self.url = url

    def is_primary(self) -> bool:
        return True

    def primary_url(self) -> str | None:
        return self.url


class RegistryApp:
    """The routes over one :class:`SchemaRegistry`; ``election`` says who the primary is."""

    def __init__(
        self,
        registry: SchemaRegistry,
        election=None,
        store=None,
        election_wait_s: float = 15.0,
        *,
        users: dict | None = None,
        realm: str = "SchemaRegistry",
        forward_ssl: ssl.SSLContext | None = None,
    ):
        self.registry = registry
        self.users = users
        self.realm = realm
        self.forward_ssl = forward_ssl
        self.election_wait_s = election_wait_s
        self.election = election or AlwaysPrimary()
        self.store = store
        self._session: ClientSession | None = None

    def build(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._authenticate], client_max_size=16 * 1024 * 1024)
        for method, path, handler in ROUTES:
            app.router.add_route(method, "/" + path, getattr(self, handler))
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app) -> None:
        if self._session is not None:
            await self._session.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except errors.SchemaRegistryError as e:
            return _json(e.body(), e.status)
        except web.HTTPException as e:
            if e.status >= 400:
                return _json({"error_code": e.status, "message": f"HTTP {e.status} {e.reason}"}, e.status)
            raise
        except Exception:  # noqa: BLE001 - an unexpected failure is a 500 with Confluent's body
            log.exception("%s %s failed", request.method, request.path)
            return _json({"error_code": 50001, "message": "Error in the backend data store"}, 500)

    @web.middleware
    async def _authenticate(self, request: web.Request, handler):
        """HTTP basic authentication when users are configured: 401 with Confluent's 40101 body."""
        if self.users is None:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        user = None
        if header[:6].lower() == "basic ":
            try:
                name, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                name, password = "", ""
            stored = self.users.get(name)
            if stored is not None and password_matches(stored, password):
                user = name
        if user is None:
            resp = _json({"error_code": 40101, "message": "Unauthorized"}, 401)
            resp.headers["WWW-Authenticate"] = f'Basic realm="{self.realm}"'
            return resp
        return await handler(request)

    async def _run(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    @staticmethod
    async def _body(request: web.Request) -> dict:
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise errors.SchemaRegistryError(400, "Unrecognized request body: not JSON", status=400) from None
        if not isinstance(body, dict):
            raise errors.SchemaRegistryError(400, "Unrecognized request body: not a JSON object", status=400)
        return body

    async def _forwarded(self, request: web.Request) -> web.Response | None:
        """The primary's answer when this instance is not the primary; None when it is."""
        url = self.election.primary_url()
        deadline = asyncio.get_running_loop().time() + self.election_wait_s
        while not url and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)  # an election in progress (a start, a rebalance)
            url = self.election.primary_url()
        if self.election.is_primary():
            return None
        if request.headers.get(FORWARDED_HEADER):
            # sent on by an instance that took this one for the primary: never forward it again
            raise errors.forward_error(f"this instance is not the primary (the primary is {url or 'not known'})")
        if not url:
            raise errors.forward_error(f"no primary instance was elected in {self.election_wait_s:g} s")
        if self._session is None:
            self._session = ClientSession(timeout=ClientTimeout(total=30))
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
        headers[FORWARDED_HEADER] = "1"
        try:
            async with self._session.request(
                request.method,
                url + request.path_qs,
                data=await request.read(),
                headers=headers,
                ssl=self.forward_ssl if url.startswith("https:") else None,
            ) as resp:
                body, status = await resp.read(), resp.status
        except (TimeoutError, ClientError) as e:
            raise errors.forward_error(f"{url}: {e or type(e).__name__}") from None
        if status < 300 and self.store is not None:
            # read what the primary wrote before answering, so this instance's next read sees it
            try:
                await self._run(self.store.sync)
            except errors.SchemaRegistryError:
                log.warning("the write forwarded to %s is not read back yet", url)
        return web.Response(body=body, status=status, content_type=CONTENT_TYPE)
        try:
            pass
        except (TimeoutError, ClientError) as e:
            raise errors.forward_error(f"{url}: {e or type(e).__name__}") from None

    # -- routes ------------------------------------------------------------------------------------
    async def root(self, request):
        return _json({})

    async def metadata_id(self, request):
        return _json({"scope": {"path": [], "clusters": {}}})

    async def contexts(self, request):
        return _json(["."])

    async def schema_types(self, request):
        return _json(list(SCHEMA_TYPES))

    async def list_schemas(self, request):
        """Every version (``subjectPrefix``, ``deleted``, ``latestOnly`` as Confluent's filters)."""
        prefix = request.query.get("subjectPrefix", "")
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
        out = []
        for subject in self.registry.list_subjects(deleted):
            if not subject.startswith(prefix):
                continue
            versions = self.registry.versions(subject, deleted)
            for v in versions[-1:] if latest_only else versions:
                sv = self.registry.get_version(subject, v, deleted)
                out.append(sv.as_json())
        return _json(out)

    async def list_subjects(self, request):
        return _json(self.registry.list_subjects(_flag(request, "deleted")))

    async def list_versions(self, request):
        return _json(self.registry.versions(request.match_info["subject"], _flag(request, "deleted")))

    async def register(self, request):
        body = await self._body(request)
        forwarded = await self._forwarded(request)
        if forwarded is not None:
            return forwarded
        schema_id = await self._run(
            self.registry.register,
            request.match_info["subject"],
            body.get("schemaType"),
            body.get("schema"),
            body.get("references") or [],
        )
        return _json({"id": schema_id})

    async def get_version(self, request):
        sv = self.registry.get_version(
            request.match_info["subject"], request.match_info["version"], _flag(request, "deleted")
        )
        out = sv.as_json()
        out["schema"] = _formatted(request, sv.schema_type, sv.schema)
        return _json(out)

    async def get_version_schema(self, request):
        sv = self.registry.get_version(
            request.match_info["subject"], request.match_info["version"], _flag(request, "deleted")
        )
        return web.Response(text=_formatted(request, sv.schema_type, sv.schema), content_type=CONTENT_TYPE)

    async def referenced_by(self, request):
        subject = request.match_info["subject"]
        sv = self.registry.get_version(subject, request.match_info["version"])
        return _json(self.registry.referenced_by(subject, sv.version))

    async def lookup(self, request):
        body = await self._body(request)
        sv = await self._run(
            self.registry.lookup,
            request.match_info["subject"],
            body.get("schemaType"),
            body.get("schema"),
            body.get("references") or [],
            _flag(request, "deleted"),
        )
        return _json(sv.as_json())

    async def delete_subject(self, request):
        forwarded = await self._forwarded(request)
        if forwarded is not None:
            return forwarded
        return _json(
            await self._run(self.registry.delete_subject, request.match_info["subject"], _flag(request, "permanent"))
        )

    async def delete_version(self, request):
        forwarded = await self._forwarded(request)
        if forwarded is not None:
            return forwarded
        return _json(
            await self._run(
                self.registry.delete_version,
                request.match_info["subject"],
                request.match_info["version"],
                _flag(request, "permanent"),
            )
        )

    def _schema_id(self, request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise errors.SchemaRegistryError(40403, "Schema not found") from None

    async def get_schema(self, request):
        schema_type, text, refs = self.registry.get_by_id(self._schema_id(request))
        out: dict = {}
        if schema_type != "AVRO":
            out["schemaType"] = schema_type
        if refs:
            out["references"] = refs
        out["schema"] = _formatted(request, schema_type, text)
        return _json(out)

    async def get_schema_text(self, request):
        schema_type, text, _ = self.registry.get_by_id(self._schema_id(request))
        return web.Response(text=_formatted(request, schema_type, text), content_type=CONTENT_TYPE)

    async def get_schema_versions(self, request):
        svs = self.registry.subject_versions_of_id(self._schema_id(request), _flag(request, "deleted"))
        return _json([{"subject": v.subject, "version": v.version} for v in svs])

    async def get_schema_subjects(self, request):
        svs = self.registry.subject_versions_of_id(self._schema_id(request), _flag(request, "deleted"))
        return _json(sorted({v.subject for v in svs}))

    async def get_config(self, request):
        subject = request.match_info.get("subject")
        level = self.registry.get_config(subject, _flag(request, "defaultToGlobal"))
        return _json({"compatibilityLevel": level})

    async def put_config(self, request):
        body = await self._body(request)
        forwarded = await self._forwarded(request)
        if forwarded is not None:
            return forwarded
        level = await self._run(self.registry.set_config, request.match_info.get("subject"), body.get("compatibility"))
        return _json({"compatibility": level})

    async def delete_config(self, request):
        forwarded = await self._forwarded(request)
        if forwarded is not None:
            return forwarded
        level = await self._run(self.registry.delete_config, request.match_info.get("subject"))
        return _json({"compatibilityLevel": level})

    async def compatibility(self, request):
        body = await self._body(request)
        subject = request.match_info["subject"]
        version = request.match_info.get("version")
        if version is not None:
            try:
                self.registry.get_version(subject, version)
            except errors.SchemaRegistryError as e:
                if e.error_code == 40401 and str(version) == "latest":
                    return _json({"is_compatible": True})
                raise
        problems = await self._run(
            self.registry.test_compatibility,
            subject,
            version,
            body.get("schemaType"),
            body.get("schema"),
            body.get("references") or [],
        )
        out: dict = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            out["messages"] = problems
        return _json(out)

    async def get_mode(self, request):
        return _json({"mode": "READWRITE"})

    async def put_mode(self, request):
        body = await self._body(request)
        if str(body.get("mode", "")).upper() != "READWRITE":
            raise errors.SchemaRegistryError(42205, "Only the mode READWRITE is supported")
        return _json({"mode": "READWRITE"})
