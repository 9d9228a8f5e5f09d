"""Where the exactly-once stream sink keeps each micro-batch's commit record.

A micro-batch's commit record (:class:`CommitRecord`) lists the prepared transactions that make up
the batch; the driver writes it BEFORE completing any of them, and a restarted driver replaying the
batch finds it and completes the same transactions (the design: docs/spark-connector.md,
"Exactly-once writes").  Tasks also register each transactional id before its transaction begins,
so the driver can abort attempts nobody reported.  Two stores with one interface:

* :class:`KafkaSinkTransactionLog`: the compacted topic :data:`SINK_LOG_TOPIC` on the cluster
  itself, reached through ``kafka.bootstrap.servers`` alone (what a managed cluster offers);
* :class:`SinkTransactionLog`: ZooKeeper, under the sink's ``zookeeper.connect`` chroot (the
  store of queries given ``zookeeper.connect``; their existing records stay readable).

:func:`open_sink_log` picks one.  Interface (both): ``register``, ``read``, ``decide`` (create
unless present: the first decision wins), ``replace`` (at the version read), ``registered``,
``forget_registered``, ``forget_commits_before``; a context manager; one instance per call, not
thread-safe; used on executors (``register``) and on the driver.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from pyklog.broker.errors import (
    ConfigError,
    PyklogError,
    TopicAlreadyExistsError,
    ZooKeeperError,
)
from pyklog.broker.record.batch import CONTROL_COMMIT
from pyklog.broker.record.reader import iter_batches
from pyklog.broker.zk import paths
from pyklog.connector.partitioner import murmur2, to_positive
from pyklog.connector.spark.options import ClusterOptions

log = logging.getLogger(__name__)

__all__ = [
    "SINK_LOG_TOPIC",
    "CommitRecord",
    "KafkaSinkTransactionLog",
    "SinkLogConflictError",
    "SinkTransactionLog",
    "open_sink_log",
]

#: the compacted topic of :class:`KafkaSinkTransactionLog`; the brokers protect it as they protect
#: their own internal topics (``pyklog.broker.zk.topics.SPARK_SINK_LOG_TOPIC``, ``is_protected``)
SINK_LOG_TOPIC = "__pyklog_spark_sinks"
SINK_LOG_PARTITIONS = 8
SINK_LOG_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(4 << 20),
    "segment.ms": str(3600 * 1000),
    "min.cleanable.dirty.ratio": "0.1",
}


class SinkLogConflictError(PyklogError):
    """A commit record changed since this driver read it: another driver runs the same query."""


@dataclass(frozen=True)
class CommitRecord:
    """The driver's durable decision for one micro-batch: which prepared transactions make up the
    batch.  ``state`` is ``prepared`` (written before the first completion) or ``committed``."""

    query_id: str
    batch_id: int
    transactions: tuple  # ((transactional_id, producer_id, producer_epoch), ...)
    state: str = "prepared"
    started_at: float | None = None  # the oldest transaction's start (wall clock)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "query_id": self.query_id,
                "batch_id": self.batch_id,
                "state": self.state,
                "started_at": self.started_at,
                "transactions": [list(t) for t in self.transactions],
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> CommitRecord:
        try:
            d = json.loads(data.decode())
            txns = tuple((str(t[0]), int(t[1]), int(t[2])) for t in d["transactions"])
            state = d["state"]
            if state not in ("prepared", "committed"):
                raise ValueError(f"state {state!r}")
            return cls(str(d["query_id"]), int(d["batch_id"]), txns, state, d.get("started_at"))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise ZooKeeperError(f"unreadable exactly-once sink record {path}: {e}; read {data[:200]!r}") from e


class SinkTransactionLog:
    """The exactly-once stream sink's records in ZooKeeper, when the sink is given
    ``zookeeper.connect`` (the cluster's own ZooKeeper, under the
    sink's ``zookeeper.connect`` chroot)::

        /pyklog_spark_sinks/[query id]/commits/[batch id]                    persistent  CommitRecord JSON
        /pyklog_spark_sinks/[query id]/transactions/[batch id]/[transactional id]   persistent  {"partition","attempt"}

    ``commits/N`` is created by the driver BEFORE it completes any transaction of batch N (a
    create, so the first decision wins) and is what a restarted driver replaying batch N finds.
    ``transactions/N/*`` is written by each task before its transaction begins, so the driver can
    abort transactions nobody reported.  Used on executors (``register``) and on the driver; one
    instance per call, not thread-safe; a context manager that opens and closes its session."""

    ROOT = paths.SPARK_SINKS

    def __init__(self, cluster: ClusterOptions):
        if not cluster.zookeeper_connect:
            raise ConfigError(
                "pyklog sink: deliveryGuarantee=exactly-once in a streaming query needs option "
                "'zookeeper.connect' (it keeps each micro-batch's commit record there)"
            )
        self._connect = cluster.zookeeper_connect
        self._timeout_s = cluster.zk_session_timeout_s
        self._credentials = cluster.zookeeper_credentials
        self._zk = None

    # paths (built in pyklog.broker.zk.paths)
    @classmethod
    def commit_path(cls, query_id: str, batch_id: int) -> str:
        return paths.spark_sink_commit(query_id, batch_id)

    @classmethod
    def transactions_path(cls, query_id: str, batch_id: int | None = None) -> str:
        return paths.spark_sink_transactions(query_id, batch_id)

    def __enter__(self) -> SinkTransactionLog:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        from pyklog.broker.zk.znode_acls import OPEN_ACL, client_credentials, kazoo_kwargs

        # with credentials the query's records are its own (its identity ALL, everyone READ) under
        # the open root, which any query may create under
        credentials = client_credentials(self._credentials)
        zk = KazooClient(hosts=self._connect, timeout=self._timeout_s, **kazoo_kwargs(credentials, secure=True))
        try:
            zk.start(timeout=max(self._timeout_s, 10.0))
            if credentials is not None:
                zk.retry(zk.ensure_path, self.ROOT, acl=list(OPEN_ACL))
        except KazooTimeoutError as e:
            zk.close()
            raise ZooKeeperError(f"pyklog sink: cannot connect to ZooKeeper at {self._connect}: {e}") from e
        self._zk = zk
        return self

    def __exit__(self, *exc) -> None:
        zk, self._zk = self._zk, None
        if zk is not None:
            zk.stop()
            zk.close()

    def register(self, query_id: str, batch_id: int, tid: str, partition: int, attempt: int) -> None:
        from kazoo.exceptions import NodeExistsError

        path = f"{self.transactions_path(query_id, batch_id)}/{tid}"
        data = json.dumps({"partition": partition, "attempt": attempt}, sort_keys=True).encode()
        try:
            self._zk.retry(self._zk.create, path, data, makepath=True)
        except NodeExistsError:  # our own create, retried after a reconnect
            pass

    def read(self, query_id: str, batch_id: int) -> tuple[CommitRecord | None, int]:
        from kazoo.exceptions import NoNodeError

        path = self.commit_path(query_id, batch_id)
        try:
            data, stat = self._zk.retry(self._zk.get, path)
        except NoNodeError:
            return None, -1
        return CommitRecord.decode(data, path), stat.version

    def decide(self, record: CommitRecord) -> tuple[CommitRecord, int, bool]:
        """Create ``commits/N`` with ``record`` unless it exists; return the record that holds
        (ours or the earlier one), its version, and whether ours was created."""
        from kazoo.exceptions import NodeExistsError

        path = self.commit_path(record.query_id, record.batch_id)
        try:
            self._zk.retry(self._zk.create, path, record.encode(), makepath=True)
            return record, 0, True
        except NodeExistsError:
            existing, version = self.read(record.query_id, record.batch_id)
            if existing is None:  # deleted in between: cannot happen while one driver runs
                raise ZooKeeperError(f"pyklog sink: {path} vanished while being read") from None
            # a create retried after a lost connection may have been ours
            if existing.transactions == record.transactions and version == 0 and existing.state == record.state:
                return existing, version, True
            return existing, version, False

    def replace(self, record: CommitRecord, version: int) -> int:
        """Overwrite ``commits/N`` if it is still at ``version`` (BadVersionError otherwise)."""
        stat = self._zk.retry(
            self._zk.set, self.commit_path(record.query_id, record.batch_id), record.encode(), version=version
        )
        return stat.version

    def registered(self, query_id: str, up_to_batch: int) -> dict[int, list[str]]:
        """Transactional ids tasks registered, per batch id <= ``up_to_batch``."""
        from kazoo.exceptions import NoNodeError

        out = {}
        try:
            batches = self._zk.retry(self._zk.get_children, self.transactions_path(query_id))
        except NoNodeError:
            return out
        for b in batches:
            if not b.isdigit() or int(b) > up_to_batch:
                continue
            try:
                out[int(b)] = sorted(self._zk.retry(self._zk.get_children, self.transactions_path(query_id, int(b))))
            except NoNodeError:
                continue
        return out

    def forget_registered(self, query_id: str, batch_id: int, tids) -> None:
        """Delete the registrations ``tids`` of a batch, then the batch's node if nothing else
        registered meanwhile (a straggler's registration stays for the next commit's clean-up)."""
        from kazoo.exceptions import NoNodeError, NotEmptyError

        base = self.transactions_path(query_id, batch_id)
        for tid in tids:
            try:
                self._zk.retry(self._zk.delete, f"{base}/{tid}")
            except NoNodeError:
                pass
        try:
            self._zk.retry(self._zk.delete, base)
        except (NoNodeError, NotEmptyError):
            pass

    def forget_commits_before(self, query_id: str, batch_id: int) -> None:
        from kazoo.exceptions import NoNodeError

        base = paths.spark_sink_commits(query_id)
        try:
            children = self._zk.retry(self._zk.get_children, base)
        except NoNodeError:
            return
        for c in children:
            if c.isdigit() and int(c) < batch_id:
                try:
                    self._zk.retry(self._zk.delete, f"{base}/{c}")
                except NoNodeError:
                    pass


def open_sink_log(cluster: ClusterOptions, producer_config: dict, transactional_id: str):
    """The commit-record store of an exactly-once stream sink: ZooKeeper when the sink was given
    ``zookeeper.connect`` (as before: a restarted query keeps finding its records), else the
    cluster's :data:`SINK_LOG_TOPIC`.  ``producer_config``: the sink's producer settings (where the
    cluster is, security); ``transactional_id``: the id the driver's writes to the topic use (under
    the query's transactional-id prefix, so the query's ACLs cover it)."""
    if cluster.zookeeper_connect:
        return SinkTransactionLog(cluster)
    return KafkaSinkTransactionLog(cluster, producer_config, transactional_id)


class KafkaSinkTransactionLog:
    """The exactly-once stream sink's records in the compacted topic :data:`SINK_LOG_TOPIC`.

    Records of one query all go to one partition (murmur2 of the query id over the topic's
    partitions), keyed as the ZooKeeper store's paths are named::

        <query id>/commits/<batch id>                      CommitRecord JSON (null: forgotten)
        <query id>/transactions/<batch id>/<transactional id>   {"partition","attempt"} (null: forgotten)

    Fencing: the driver writes in Kafka transactions under one transactional id per query
    (``<prefix>-sink-log``); initialising it (first thing in :meth:`decide`) completes or aborts
    whatever an earlier driver of the query left open and fences that driver out, so once
    initialised this instance is the query's only writer: the records it reads are the query's
    state, and its read-then-write decisions cannot interleave with another driver's (a fenced
    driver's next write fails with ProducerFencedError).  Tasks register with an idempotent
    producer outside transactions.

    Reads go to the high watermark and resolve transactions from the batches themselves (a
    transactional batch counts once its COMMIT marker follows): a read_committed read would stop
    at another query's open transaction on the same partition.  The version of a record is the
    offset it was written at.  The topic is created on first use (compacted, replication factor
    up to 3); compaction keeps the latest record per key and drops forgotten ones."""

    TOPIC = SINK_LOG_TOPIC

    def __init__(self, cluster: ClusterOptions, producer_config: dict, transactional_id: str):
        if not cluster.bootstrap_servers:
            raise ConfigError("pyklog sink: the exactly-once commit records need kafka.bootstrap.servers")
        self._cluster = cluster
        self._config = {
            k: v
            for k, v in producer_config.items()
            if k not in ("transactional.id", "transaction.timeout.ms", "partitioner", "compression.type")
        }
        self._config.update({"acks": "all", "enable.idempotence": True, "linger.ms": 0})
        self._tid = transactional_id
        self._consumer = None
        self._txn_producer = None
        self._states: dict[str, dict] = {}  # query id -> {key: (value bytes | None, offset)}

    # -- life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> KafkaSinkTransactionLog:
        from pyklog.connector.consumer import SimpleConsumer

        self._consumer = SimpleConsumer(
            self._cluster.bootstrap_servers,
            client_id=self._config.get("client.id") or "pyklog-spark-sink-log",
            security=self._cluster.security,
        )
        try:
            self._ensure_topic()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        producer, self._txn_producer = self._txn_producer, None
        consumer, self._consumer = self._consumer, None
        if producer is not None:
            producer.close()
        if consumer is not None:
            consumer.close()

    def _ensure_topic(self) -> None:
        client = self._consumer.client
        try:
            client.partitions_for(self.TOPIC)
            return
        except PyklogError:
            pass
        brokers = len(client.metadata(refresh=True).brokers)
        try:
            client.create_topic(
                self.TOPIC,
                SINK_LOG_PARTITIONS,
                configs=dict(SINK_LOG_CONFIGS),
                replication_factor=max(1, min(3, brokers)),
            )
            log.info("pyklog sink: created %s for exactly-once commit records", self.TOPIC)
        except TopicAlreadyExistsError:
            pass  # another query created it meanwhile

    def _partition(self, query_id: str) -> int:
        n = len(self._consumer.client.partitions_for(self.TOPIC))
        return to_positive(murmur2(query_id.encode())) % n

    # -- reading --------------------------------------------------------------------------------
    def _state(self, query_id: str) -> dict:
        """``{key: (value, offset)}`` of the query's records, read once per instance (the
        instance's own writes update it afterwards)."""
        state = self._states.get(query_id)
        if state is None:
            state = self._states[query_id] = self._read_partition(query_id)
        return state

    def _read_partition(self, query_id: str) -> dict:
        c = self._consumer
        p = self._partition(query_id)
        prefix = f"{query_id}/".encode()
        hw = c.latest_offset(self.TOPIC, p)
        offset = c.earliest_offset(self.TOPIC, p)
        state: dict = {}
        pending: dict[int, list] = {}  # producer id -> [(key, value, offset)] of its open transaction
        while offset < hw:
            raw = c.fetch_raw(self.TOPIC, p, offset, 4 << 20)
            nxt = offset
            for b in iter_batches(bytes(raw.records)):
                if b.header.last_offset < offset:
                    continue
                nxt = b.header.last_offset + 1
                if b.is_control:
                    done = pending.pop(b.producer_id, [])
                    if b.control_type == CONTROL_COMMIT:
                        state.update((k, (v, o)) for k, v, o in done)
                    continue
                mine = [(r.key.decode(), r.value, r.offset) for r in b.records if r.key and r.key.startswith(prefix)]
                if b.is_transactional:
                    pending.setdefault(b.producer_id, []).extend(mine)
                else:
                    state.update((k, (v, o)) for k, v, o in mine)
            if nxt <= offset:
                raise PyklogError(f"pyklog sink: no progress reading {self.TOPIC}-{p} at offset {offset} (end {hw})")
            offset = nxt
        return {k: vo for k, vo in state.items() if vo[0] is not None}

    @staticmethod
    def _commit_key(query_id: str, batch_id: int) -> str:
        return f"{query_id}/commits/{batch_id}"

    @staticmethod
    def _registration_prefix(query_id: str, batch_id: int | None = None) -> str:
        return f"{query_id}/transactions/" if batch_id is None else f"{query_id}/transactions/{batch_id}/"

    def read(self, query_id: str, batch_id: int) -> tuple[CommitRecord | None, int]:
        key = self._commit_key(query_id, batch_id)
        found = self._state(query_id).get(key)
        if found is None:
            return None, -1
        return CommitRecord.decode(found[0], f"{self.TOPIC}:{key}"), found[1]

    def registered(self, query_id: str, up_to_batch: int) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        prefix = self._registration_prefix(query_id)
        for key in self._state(query_id):
            if not key.startswith(prefix):
                continue
            batch, _, tid = key[len(prefix) :].partition("/")
            if batch.isdigit() and int(batch) <= up_to_batch and tid:
                out.setdefault(int(batch), []).append(tid)
        return {b: sorted(t) for b, t in out.items()}

    # -- writing --------------------------------------------------------------------------------
    def register(self, query_id: str, batch_id: int, tid: str, partition: int, attempt: int) -> None:
        """Executor side: record a task's transactional id before its transaction begins."""
        from pyklog.connector.producer import Producer

        key = self._registration_prefix(query_id, batch_id) + tid
        value = json.dumps({"partition": partition, "attempt": attempt}, sort_keys=True).encode()
        with Producer(self._config) as p:
            p.send_sync(self.TOPIC, value, key.encode(), partition=self._partition(query_id))

    def _writer(self):
        """The fenced transactional producer of this driver (initialised once per instance)."""
        if self._txn_producer is None:
            from pyklog.connector.producer import Producer

            p = Producer({**self._config, "transactional.id": self._tid})
            try:
                p.init_transactions()
            except BaseException:
                p.close()
                raise
            self._txn_producer = p
        return self._txn_producer

    def _write(self, query_id: str, entries: list[tuple[str, bytes | None]]) -> list[int]:
        """Write ``entries`` (key, value or None to forget) in one transaction; their offsets."""
        p = self._writer()
        part = self._partition(query_id)
        p.begin_transaction()
        try:
            futures = [p.send(self.TOPIC, v, k.encode(), partition=part) for k, v in entries]
            p.commit_transaction()
        except BaseException:
            try:
                p.abort_transaction()
            except Exception:  # noqa: BLE001 - the original error says more
                pass
            raise
        offsets = [f.result(30).offset for f in futures]
        state = self._state(query_id)
        for (k, v), o in zip(entries, offsets, strict=True):
            if v is None:
                state.pop(k, None)
            else:
                state[k] = (v, o)
        return offsets

    def decide(self, record: CommitRecord) -> tuple[CommitRecord, int, bool]:
        self._writer()  # fence first: from here on nobody else writes this query's records
        self._states.pop(record.query_id, None)  # and read what the fenced drivers left
        existing, version = self.read(record.query_id, record.batch_id)
        if existing is not None:
            return existing, version, False
        [offset] = self._write(record.query_id, [(self._commit_key(record.query_id, record.batch_id), record.encode())])
        return record, offset, True

    def replace(self, record: CommitRecord, version: int) -> int:
        _, current = self.read(record.query_id, record.batch_id)
        if current != version:
            raise SinkLogConflictError(
                f"pyklog sink: the commit record of micro-batch {record.batch_id} changed under this "
                f"driver (version {version}, now {current}): another driver runs query {record.query_id}"
            )
        [offset] = self._write(record.query_id, [(self._commit_key(record.query_id, record.batch_id), record.encode())])
        return offset

    def forget_registered(self, query_id: str, batch_id: int, tids) -> None:
        prefix = self._registration_prefix(query_id, batch_id)
        present = self._state(query_id)
        gone = [(prefix + t, None) for t in tids if prefix + t in present]
        if gone:
            self._write(query_id, gone)

    def forget_commits_before(self, query_id: str, batch_id: int) -> None:
        prefix = f"{query_id}/commits/"
        gone = [
            (k, None)
            for k in self._state(query_id)
            if k.startswith(prefix) and k[len(prefix) :].isdigit() and int(k[len(prefix) :]) < batch_id
        ]
        if gone:
            self._write(query_id, gone)
