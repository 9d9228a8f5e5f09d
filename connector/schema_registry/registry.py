"""The registry's state and operations, with Confluent's semantics.

:class:`SchemaRegistry` holds what the topic says, rebuilt by :meth:`SchemaRegistry.apply` (called by
the store's reader thread for every record in offset order): the subjects and their versions, the
schemas by id, the compatibility configs.  The write operations (:meth:`register`,
:meth:`delete_subject`, :meth:`delete_version`, :meth:`set_config`, :meth:`delete_config`) check
against that state, then write records through ``write(key, value)`` (the store's write, which
returns once the record is applied), so only the primary instance may call them.

Ids are global: a schema (its type, text and references) has one id in every subject; registering
it again answers its id; a new schema gets the highest id seen so far plus one.  Versions of a
subject count from 1 and are never reused.

Thread-safe: one lock guards the state; writes are serialized by a second lock so that a check and
its write are atomic on the primary.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field

from pyklog.connector.schema_registry import errors, store
from pyklog.connector.schema_registry.compatibility import (
    DEFAULT_LEVEL,
    LEVELS,
    InvalidSchemaError,
    ParsedSchema,
    check_compatibility,
    parse_schema,
)

log = logging.getLogger(__name__)

MAX_VERSION = 2**31 - 1


@dataclass
class SchemaVersion:
    subject: str
    version: int
    schema_id: int
    schema: str
    schema_type: str = "AVRO"
    references: list = field(default_factory=list)
    deleted: bool = False

    def as_json(self) -> dict:
        out: dict = {"subject": self.subject, "version": self.version, "id": self.schema_id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        out["schema"] = self.schema
        return out


def _content_key(schema_type: str, text: str, references: list) -> str:
    """What makes two schemas the same schema (and the same id)."""
    norm = text.strip()
    if schema_type in ("AVRO", "JSON"):
        try:
            # the attributes' order does not make another schema (lists, such as fields, keep theirs)
            norm = json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True)
        except ValueError:
            pass
    refs = [(r["name"], r["subject"], int(r["version"])) for r in references or []]
    return json.dumps([schema_type, norm, refs])


class SchemaRegistry:
    """See the module docstring.  ``write`` is the store's write (None for a read-only state)."""

    def __init__(self, write=None, default_level: str = DEFAULT_LEVEL):
        self._write = write
        self.default_level = default_level.upper()
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self.subjects: dict[str, dict[int, SchemaVersion]] = {}
        self.ids: dict[int, tuple[str, str, list]] = {}  # id -> (type, text, references)
        self._by_content: dict[str, int] = {}
        self.max_id = 0
        self.configs: dict[str | None, str] = {}

    # -- applying the topic ------------------------------------------------------------------------
    def apply(self, key: dict, value: dict | None, offset: int = -1) -> None:
        kt = key["keytype"]
        with self._lock:
            if kt == "SCHEMA":
                self._apply_schema(key, value)
            elif kt == "CONFIG":
                subject = key.get("subject")
                level = (value or {}).get("compatibilityLevel")
                if value is None or level is None:
                    self.configs.pop(subject, None)
                elif str(level).upper() in LEVELS:
                    self.configs[subject] = str(level).upper()
            elif kt == "DELETE_SUBJECT" and value is not None:
                upto = int(value.get("version", MAX_VERSION))
                for v in self.subjects.get(value.get("subject") or key.get("subject"), {}).values():
                    if v.version <= upto:
                        v.deleted = True

    def _apply_schema(self, key: dict, value: dict | None) -> None:
        subject, version = key["subject"], int(key["version"])
        if value is None:  # hard delete
            versions = self.subjects.get(subject, {})
            versions.pop(version, None)
            if not versions:
                self.subjects.pop(subject, None)
            return
        sv = SchemaVersion(
            subject,
            version,
            int(value["id"]),
            value["schema"],
            value.get("schemaType") or "AVRO",
            list(value.get("references") or []),
            bool(value.get("deleted", False)),
        )
        self.subjects.setdefault(subject, {})[version] = sv
        self.ids[sv.schema_id] = (sv.schema_type, sv.schema, sv.references)
        self._by_content.setdefault(_content_key(sv.schema_type, sv.schema, sv.references), sv.schema_id)
        self.max_id = max(self.max_id, sv.schema_id)

    # -- reads -------------------------------------------------------------------------------------
    def list_subjects(self, deleted: bool = False) -> list[str]:
        with self._lock:
            return sorted(s for s, vs in self.subjects.items() if any(deleted or not v.deleted for v in vs.values()))

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        with self._lock:
            vs = [v.version for v in self.subjects.get(subject, {}).values() if deleted or not v.deleted]
        if not vs:
            raise errors.subject_not_found(subject)
        return sorted(vs)

    @staticmethod
    def parse_version(version) -> int | None:
        """``latest`` / ``-1`` -> None; an int in [1, 2^31-1]; else 42202."""
        if str(version) in ("latest", "-1"):
            return None
        try:
            v = int(version)
        except (TypeError, ValueError):
            raise errors.invalid_version(version) from None
        if not 1 <= v <= MAX_VERSION:
            raise errors.invalid_version(version)
        return v

    def get_version(self, subject: str, version, deleted: bool = False) -> SchemaVersion:
        v = self.parse_version(version)
        with self._lock:
            versions = self.subjects.get(subject)
            if not versions or not any(deleted or not x.deleted for x in versions.values()):
                raise errors.subject_not_found(subject)
            if v is None:
                live = [x for x in versions.values() if deleted or not x.deleted]
                return max(live, key=lambda x: x.version)
            sv = versions.get(v)
            if sv is None or (sv.deleted and not deleted):
                raise errors.version_not_found(subject, version)
            return sv

    def get_by_id(self, schema_id: int) -> tuple[str, str, list]:
        with self._lock:
            found = self.ids.get(int(schema_id))
        if found is None:
            raise errors.SchemaRegistryError(40403, "Schema not found")
        return found

    def subject_versions_of_id(self, schema_id: int, deleted: bool = False) -> list[SchemaVersion]:
        self.get_by_id(schema_id)
        with self._lock:
            found = [
                v
                for vs in self.subjects.values()
                for v in vs.values()
                if v.schema_id == int(schema_id) and (deleted or not v.deleted)
            ]
        return sorted(found, key=lambda x: (x.subject, x.version))

    def level_for(self, subject: str | None) -> str:
        with self._lock:
            if subject is not None and subject in self.configs:
                return self.configs[subject]
            return self.configs.get(None, self.default_level)

    def get_config(self, subject: str | None, default_to_global: bool = False) -> str:
        with self._lock:
            if subject is None or default_to_global:
                return self.level_for(subject)
            if subject not in self.configs:
                raise errors.SchemaRegistryError(
                    40408, f"Subject '{subject}' does not have subject-level compatibility configured"
                )
            return self.configs[subject]

    # -- schemas and references --------------------------------------------------------------------
    def _reference_texts(self, references: list, seen: frozenset = frozenset()) -> list[str]:
        """The texts of the referenced schemas and of theirs, dependencies first."""
        out: list[str] = []
        for r in references or []:
            if not isinstance(r, dict) or not {"name", "subject", "version"} <= set(r):
                raise errors.invalid_schema(f"a reference needs name, subject and version: {r!r}")
            key = (r["subject"], str(r["version"]))
            if key in seen:
                continue
            try:
                sv = self.get_version(r["subject"], r["version"], deleted=False)
            except errors.SchemaRegistryError:
                raise errors.invalid_schema(
                    f"the reference {r['name']!r} to {r['subject']!r} version {r['version']} is not found"
                ) from None
            out += self._reference_texts(sv.references, seen | {key})
            out.append(sv.schema)
        return out

    @staticmethod
    def check_request(schema_type, text, references) -> None:
        """42201 for a request body whose fields have the wrong JSON types."""
        if not isinstance(text, str):
            raise errors.invalid_schema(f"expected the schema as a string, got {type(text).__name__}")
        if schema_type is not None and not isinstance(schema_type, str):
            raise errors.invalid_schema(f"expected schemaType as a string, got {type(schema_type).__name__}")
        if not isinstance(references, list) or not all(
            isinstance(r, dict)
            and isinstance(r.get("name"), str)
            and isinstance(r.get("subject"), str)
            and isinstance(r.get("version"), int)
            and not isinstance(r.get("version"), bool)
            for r in references
        ):
            raise errors.invalid_schema(
                "expected references as a list of {name, subject, version} objects (version a number)"
            )

    def parse(self, schema_type: str | None, text: str, references: list) -> ParsedSchema:
        self.check_request(schema_type, text, references)
        try:
            return parse_schema(schema_type, text, self._reference_texts(references))
        except InvalidSchemaError as e:
            raise errors.invalid_schema(str(e)) from None

    def _parsed(self, sv: SchemaVersion) -> ParsedSchema:
        return self.parse(sv.schema_type, sv.schema, sv.references)

    def lookup(
        self, subject: str, schema_type: str | None, text: str, references: list, deleted: bool = False
    ) -> SchemaVersion:
        """The version of ``subject`` holding this schema (POST /subjects/{subject})."""
        self.check_request(schema_type, text, references)
        schema_type = (schema_type or "AVRO").upper()
        with self._lock:
            versions = self.subjects.get(subject)
            if not versions or not any(deleted or not v.deleted for v in versions.values()):
                raise errors.subject_not_found(subject)
            key = _content_key(schema_type, text, references)
            for v in sorted(versions.values(), key=lambda x: -x.version):
                if (deleted or not v.deleted) and _content_key(v.schema_type, v.schema, v.references) == key:
                    return v
        self.parse(schema_type, text, references)  # 42201 for an invalid schema, as Confluent
        raise errors.SchemaRegistryError(40403, "Schema not found")

    def test_compatibility(
        self, subject: str, version, schema_type, text, references, level: str | None = None
    ) -> list[str]:
        """The reasons the schema breaks the subject's level against ``version`` (``latest``) or,
        for ``version`` None, against what the level says (POST /compatibility/...)."""
        new = self.parse(schema_type, text, references)
        level = level or self.level_for(subject)
        with self._lock:
            live = sorted(
                (v for v in self.subjects.get(subject, {}).values() if not v.deleted), key=lambda x: x.version
            )
        if version is not None:
            live = [self.get_version(subject, version)]
        return check_compatibility(level, new, [self._parsed(v) for v in live])

    # -- writes (the primary only) -----------------------------------------------------------------
    def _require_writer(self):
        if self._write is None:
            raise errors.SchemaRegistryError(50003, "this instance cannot write")
        return self._write

    def register(self, subject: str, schema_type: str | None, text: str, references: list) -> int:
        """The schema's id in ``subject``, registering a new version when needed (409 if incompatible)."""
        write = self._require_writer()
        self.check_request(schema_type, text, references)
        schema_type = (schema_type or "AVRO").upper()
        references = list(references)
        with self._write_lock:
            new = self.parse(schema_type, text, references)
            key = _content_key(schema_type, text, references)
            with self._lock:
                versions = self.subjects.get(subject, {})
                for v in sorted(versions.values(), key=lambda x: -x.version):
                    if not v.deleted and _content_key(v.schema_type, v.schema, v.references) == key:
                        return v.schema_id
                live = sorted((v for v in versions.values() if not v.deleted), key=lambda x: x.version)
                level = self.level_for(subject)
            problems = check_compatibility(level, new, [self._parsed(v) for v in live])
            if problems:
                raise errors.incompatible(subject, problems)
            with self._lock:
                schema_id = self._by_content.get(key) or self.max_id + 1
                version = max(self.subjects.get(subject, {}).keys(), default=0) + 1
            write(
                store.schema_key(subject, version),
                store.schema_value(subject, version, schema_id, text, schema_type, references, False),
            )
            log.info("registered subject %s version %d id %d", subject, version, schema_id)
            return schema_id

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """The ids of live versions whose references name ``subject`` ``version``."""
        with self._lock:
            return [
                v.schema_id
                for vs in self.subjects.values()
                for v in vs.values()
                if not v.deleted and any(r["subject"] == subject and int(r["version"]) == version for r in v.references)
            ]

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        write = self._require_writer()
        with self._write_lock:
            with self._lock:
                versions = dict(self.subjects.get(subject, {}))
            if not versions:
                raise errors.subject_not_found(subject)
            live = sorted(v.version for v in versions.values() if not v.deleted)
            if permanent:
                if live:
                    raise errors.SchemaRegistryError(
                        40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
                    )
                for v in sorted(versions):
                    write(store.schema_key(subject, v), None)
                if subject in self.configs:
                    write(store.config_key(subject), None)
                return sorted(versions)
            if not live:
                raise errors.SchemaRegistryError(
                    40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
                )
            for v in live:
                if self.referenced_by(subject, v):
                    raise errors.SchemaRegistryError(
                        42206, f"One or more references exist to the schema {{subject={subject},version={v}}}."
                    )
            write(store.delete_subject_key(subject), {"subject": subject, "version": live[-1]})
            return live

    def delete_version(self, subject: str, version, permanent: bool = False) -> int:
        write = self._require_writer()
        with self._write_lock:
            sv = self.get_version(subject, version, deleted=True) if permanent else self.get_version(subject, version)
            if permanent:
                if not sv.deleted:
                    raise errors.SchemaRegistryError(
                        40407,
                        f"Subject '{subject}' Version {sv.version} was not deleted first before being permanently deleted",
                    )
                write(store.schema_key(subject, sv.version), None)
                return sv.version
            if self.referenced_by(subject, sv.version):
                raise errors.SchemaRegistryError(
                    42206, f"One or more references exist to the schema {{subject={subject},version={sv.version}}}."
                )
            write(
                store.schema_key(subject, sv.version),
                store.schema_value(subject, sv.version, sv.schema_id, sv.schema, sv.schema_type, sv.references, True),
            )
            return sv.version

    def set_config(self, subject: str | None, level) -> str:
        write = self._require_writer()
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise errors.invalid_compatibility_level(level)
        with self._write_lock:
            write(store.config_key(subject), {"compatibilityLevel": level.upper()})
        return level.upper()

    def delete_config(self, subject: str | None) -> str:
        write = self._require_writer()
        with self._write_lock:
            previous = self.level_for(subject)
            if subject is not None and subject not in self.configs:
                raise errors.subject_not_found(subject)
            write(store.config_key(subject), None)
        return previous
