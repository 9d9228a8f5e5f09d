"""The registry's storage: Confluent's records in a compacted topic, and the thread that reads them.

Record format (Confluent Schema Registry's and Karapace's; keys and values are JSON, UTF-8)::

    key   {"keytype":"SCHEMA","subject":"s","version":1,"magic":1}
    value {"subject":"s","version":1,"id":7,"schemaType":"JSON","references":[...],
           "schema":"...","deleted":false}        schemaType left out for AVRO, references when empty;
                                                  a null value (tombstone): the version is deleted for good
    key   {"keytype":"CONFIG","subject":null,"magic":0}      (subject null: the global config)
    value {"compatibilityLevel":"BACKWARD"}                 null: the subject's config is removed
    key   {"keytype":"DELETE_SUBJECT","subject":"s","magic":0}
    value {"subject":"s","version":3}                       versions <= 3 of s are soft-deleted
    key   {"keytype":"NOOP","magic":0}                      (read to learn the end of the topic)

:func:`encode_key` / :func:`encode_value` / :func:`decode` are pure.  :class:`KafkaStore` owns a
pyklog producer and a reader thread: at start it creates the topic if missing (one partition,
``cleanup.policy=compact``), then reads it from the beginning and hands every record to its
``apply`` callback, in offset order, on the reader thread.  :meth:`KafkaStore.write` produces a
record and returns once the reader thread has applied it, so a write is visible to the next read
of the same instance (read-your-writes), as Confluent's KafkaStore does.

Thread-safe: ``write`` may be called from any thread; ``apply`` runs on the reader thread only.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from pyklog.broker.errors import PyklogError, TopicAlreadyExistsError
from pyklog.connector.admin import AdminClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.producer import Producer
from pyklog.connector.schema_registry.errors import SchemaRegistryError, store_error, timeout_error
from pyklog.connector.security import ClientSecurityConfig, is_security_key

log = logging.getLogger(__name__)

__all__ = ["KafkaStore", "encode_key", "encode_value", "decode"]

KEY_TYPES = ("SCHEMA", "CONFIG", "DELETE_SUBJECT", "NOOP", "MODE")


def schema_key(subject: str, version: int) -> dict:
    return {"keytype": "SCHEMA", "subject": subject, "version": int(version), "magic": 1}


def config_key(subject: str | None) -> dict:
    return {"keytype": "CONFIG", "subject": subject, "magic": 0}


def delete_subject_key(subject: str) -> dict:
    return {"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0}


def noop_key() -> dict:
    return {"keytype": "NOOP", "magic": 0}


def schema_value(
    subject: str, version: int, schema_id: int, schema: str, schema_type: str, references: list, deleted: bool
) -> dict:
    value: dict = {"subject": subject, "version": int(version), "id": int(schema_id)}
    if schema_type and schema_type != "AVRO":
        value["schemaType"] = schema_type
    if references:
        value["references"] = [
            {"name": r["name"], "subject": r["subject"], "version": int(r["version"])} for r in references
        ]
    value["schema"] = schema
    value["deleted"] = bool(deleted)
    return value


def encode_key(key: dict) -> bytes:
    return json.dumps(key, separators=(",", ":")).encode()


def encode_value(value: dict | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()


class BadRecordError(ValueError):
    """A record of the topic that is not in the registry's format (skipped with a warning)."""


def decode(key: bytes | None, value: bytes | None) -> tuple[dict, dict | None]:
    """``(key, value)`` as JSON objects (value None for a tombstone); BadRecordError otherwise."""
    if key is None:
        raise BadRecordError("a record without a key")
    try:
        k = json.loads(bytes(key))
        v = None if value is None else json.loads(bytes(value))
    except ValueError as e:
        raise BadRecordError(f"not JSON: {e}") from None
    if not isinstance(k, dict) or k.get("keytype") not in KEY_TYPES:
        raise BadRecordError(f"unknown key {k!r}")
    if v is not None and not isinstance(v, dict):
        raise BadRecordError(f"a value that is not a JSON object under {k!r}")
    if k["keytype"] == "SCHEMA" and v is not None:
        for name, typ in (("subject", str), ("version", int), ("id", int), ("schema", str)):
            if not isinstance(v.get(name), typ):
                raise BadRecordError(f"schema value without {name!r}: {k!r}")
    return k, v


def client_config(config: dict) -> dict:
    """The ``kafkastore.*`` settings without their prefix (the pyklog clients' settings)."""
    return {k[len("kafkastore.") :]: v for k, v in config.items() if k.startswith("kafkastore.")}


class KafkaStore:
    """Reads and writes the registry's topic (see the module docstring).  Thread-safe."""

    #: settings of kafkastore.* that are the registry's own, not the clients'
    OWN = frozenset(
        {"topic", "timeout.ms", "init.timeout.ms", "topic.replication.factor", "group.id", "session.timeout.ms"}
    )

    def __init__(
        self,
        settings: dict,
        topic: str,
        apply: Callable[[dict, dict | None, int], None],
        *,
        timeout_ms: int = 10000,
        init_timeout_ms: int = 60000,
        replication_factor: int = 3,
    ):
        self.topic = topic
        self._apply = apply
        self.timeout_s = timeout_ms / 1000.0
        self.init_timeout_s = init_timeout_ms / 1000.0
        self.replication_factor = replication_factor
        self.bootstrap = settings.get("bootstrap.servers")
        if not self.bootstrap:
            raise ValueError("kafkastore.bootstrap.servers is required")
        self.security = ClientSecurityConfig.from_config(settings)
        extra = {k: v for k, v in settings.items() if k not in self.OWN and not is_security_key(k)}
        extra.pop("bootstrap.servers", None)
        pconf = {
            "bootstrap.servers": self.bootstrap,
            "client.id": "pyklog-schema-registry",
            "acks": "all",
            "linger.ms": 0,
            "request.timeout.ms": min(timeout_ms, 30000),
            "delivery.timeout.ms": max(timeout_ms, 1000),
            "max.block.ms": timeout_ms,
            "retry.backoff.ms": 100,
        }
        pconf.update(extra)
        self._producer_config = {**pconf, **{k: v for k, v in settings.items() if is_security_key(k)}}
        self._producer: Producer | None = None
        self._consumer: SimpleConsumer | None = None
        self._cond = threading.Condition()
        self._position = 0  # the next offset to read
        self._healthy = False
        self._last_error: str | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- start / stop ------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the topic if missing, read it to its end, then follow it on the reader thread."""
        self._consumer = SimpleConsumer(
            self.bootstrap, client_id="pyklog-schema-registry-reader", max_wait_ms=200, security=self.security
        )
        client = self._consumer.client
        deadline = time.monotonic() + self.init_timeout_s
        while True:
            try:
                self._ensure_topic(client)
                end = self._consumer.latest_offset(self.topic, 0)
                break
            except PyklogError as e:
                if time.monotonic() > deadline:
                    raise store_error(f"cannot reach the topic {self.topic!r}: {e}") from None
                log.warning("waiting for the topic %s: %s", self.topic, e)
                time.sleep(0.5)
        self._producer = Producer(self._producer_config)
        self._thread = threading.Thread(target=self._run, name="pyklog-schema-registry-reader", daemon=True)
        self._thread.start()
        with self._cond:
            if not self._cond.wait_for(lambda: self._position >= end, timeout=self.init_timeout_s):
                raise store_error(f"the topic {self.topic!r} was not read to offset {end} in time")
        log.info("read the topic %s to offset %d", self.topic, end)

    def _ensure_topic(self, client) -> None:
        md = client.metadata([self.topic], refresh=True)
        if self.topic in md.topics and md.topics[self.topic].partitions:
            self._check_topic(client, len(md.topics[self.topic].partitions))
            return
        rf = max(1, min(self.replication_factor, len(md.brokers)))
        try:
            client.create_topic(self.topic, 1, {"cleanup.policy": "compact"}, replication_factor=rf)
            log.info("created the topic %s (compacted, replication factor %d)", self.topic, rf)
        except TopicAlreadyExistsError:
            client.wait_for_topic(self.topic, 1)

    def _check_topic(self, client, partitions: int) -> None:
        """Warn about an existing topic the registry cannot rely on (as Confluent's KafkaStore
        checks): more than one partition (no order between them), a cleanup policy other than
        compact (old schemas would be deleted with time)."""
        if partitions != 1:
            log.warning(
                "the topic %s has %d partitions: the registry reads and writes partition 0 only", self.topic, partitions
            )
        try:
            configs = AdminClient(client=client).describe_configs([(2, self.topic)])[(2, self.topic)]
        except PyklogError as e:
            log.warning("cannot read the configs of the topic %s: %s", self.topic, e)
            return
        policy = next((c.get("value") for c in configs if c.get("name") == "cleanup.policy"), None)
        if policy is not None and "compact" not in str(policy):
            log.warning(
                "the topic %s has cleanup.policy=%s: schemas will be deleted with time; set it to compact",
                self.topic,
                policy,
            )

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            if self._producer is not None:
                self._producer.close(1)
            if self._consumer is not None:
                self._consumer.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            log.debug("closing the store's clients failed", exc_info=True)

    # -- the reader thread -------------------------------------------------------------------------
    def _run(self) -> None:
        assert self._consumer is not None
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                r = self._consumer.fetch(self.topic, 0, self._position)
            except Exception as e:  # noqa: BLE001 - the cluster may be down: keep trying
                with self._cond:
                    self._healthy = False
                    self._last_error = str(e)
                log.warning("reading %s at offset %d failed: %s", self.topic, self._position, e)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.1
            for rec in r.records:
                try:
                    key, value = decode(rec.key, rec.value)
                except BadRecordError as e:
                    log.warning("skipped the record at offset %d of %s: %s", rec.offset, self.topic, e)
                    continue
                try:
                    self._apply(key, value, rec.offset)
                except Exception:  # noqa: BLE001 - one bad record never stops the reader
                    log.exception("applying the record at offset %d of %s failed", rec.offset, self.topic)
            with self._cond:
                self._healthy = True
                self._last_error = None
                if r.next_offset > self._position:
                    self._position = r.next_offset
                    self._cond.notify_all()

    @property
    def healthy(self) -> bool:
        return self._healthy

    def sync(self) -> None:
        """Wait until this instance has read the topic to its current end (a new primary does,
        before it hands out ids).  SchemaRegistryError 50002 when it cannot in time."""
        assert self._consumer is not None
        try:
            end = self._consumer.latest_offset(self.topic, 0)
        except PyklogError as e:
            raise store_error(f"cannot read the end of {self.topic!r}: {e}") from None
        with self._cond:
            if not self._cond.wait_for(lambda: self._position >= end, timeout=self.timeout_s):
                raise timeout_error(f"the topic {self.topic!r} was not read to offset {end} in time")

    # -- writes ------------------------------------------------------------------------------------
    def write(self, key: dict, value: dict | None) -> int:
        """Produce one record and wait until this instance has applied it; its offset.

        SchemaRegistryError 50002 when the cluster does not take it in ``kafkastore.timeout.ms``,
        50001 for another failure."""
        assert self._producer is not None
        try:
            md = self._producer.send_sync(
                self.topic, encode_value(value), encode_key(key), partition=0, timeout=self.timeout_s + 1
            )
        except SchemaRegistryError:
            raise
        except TimeoutError:
            raise timeout_error(f"the write to {self.topic!r} was not acknowledged in {self.timeout_s:g} s") from None
        except Exception as e:  # noqa: BLE001 - any producer failure is a store error to the client
            raise store_error(f"the write to {self.topic!r} failed: {e}") from None
        with self._cond:
            if not self._cond.wait_for(lambda: self._position > md.offset, timeout=self.timeout_s):
                raise timeout_error(f"the record at offset {md.offset} of {self.topic!r} was not read back in time")
        return md.offset
