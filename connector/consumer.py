"""The low-level "simple" consumer of the seed's Consumer APIs.

:class:`SimpleConsumer` is stateless about positions: every call names the offset to read from,
and the caller keeps its offsets however it likes.  It maps closely to the network requests:

* :meth:`SimpleConsumer.fetch`: one Fetch for one partition, decoded into :class:`ConsumerRecord`
  values, plus the partition's high watermark, last stable offset, log start offset and the
  offset to fetch next (``next_offset``);
* :meth:`SimpleConsumer.multi_fetch`: many partitions, one Fetch request per leader broker (sent
  to every leader before any answer is awaited);
* :meth:`SimpleConsumer.fetch_raw` / :meth:`multi_fetch_raw`: the undecoded record bytes plus
  the partition fields, for bulk decoders (the Spark reader turns them into Arrow itself);
* :meth:`SimpleConsumer.use_leader`: a partition's leader known in advance (node id and address),
  fetched from without a metadata lookup until it answers that it is no longer the leader;
* :meth:`SimpleConsumer.offsets_before` (ListOffsets v0, the seed's ``getOffsetsBefore``) and
  :meth:`earliest_offset` / :meth:`latest_offset` / :meth:`offset_for_time` (ListOffsets v1+).

Decoding rules (the same as Kafka's Java consumer):

* a partial batch at the end of the response (cut at ``max_bytes``) is dropped; ``next_offset``
  then points at it, so the next fetch reads it whole;
* a batch may start before the requested offset (the broker returns whole batches): records
  below the requested offset are skipped;
* control batches (transaction markers) are never returned, but ``next_offset`` moves past them;
* with ``isolation_level="read_committed"`` the broker answers up to the last stable offset and
  lists the aborted transactions ``(producer_id, first_offset)``; records of aborted
  transactions are dropped (a producer's records from its abort's ``first_offset`` until its
  ABORT marker).

``OFFSET_OUT_OF_RANGE`` raises :class:`~broker.errors.OffsetOutOfRangeError` whose
``log_start_offset`` and ``log_end_offset`` attributes say what range is valid.

Thread-safe (the underlying :class:`~connector.client.ClusterClient` is).
"""

from __future__ import annotations

import heapq
import logging
import time
from typing import NamedTuple

from pyklog.broker.errors import (
    ConfigError,
    MessageTooLargeError,
    NetworkError,
    OffsetOutOfRangeError,
    PyklogError,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.reader import iter_batches
from pyklog.connector.client import (
    EARLIEST,
    LATEST,
    REFRESH_METADATA_CODES,
    ClusterClient,
    retriable_wire_error,
    wire_error,
)

log = logging.getLogger(__name__)

__all__ = ["SimpleConsumer", "ConsumerRecord", "FetchResult", "RawFetchResult", "decode_records"]

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple  # ((str, bytes | None), ...)


class FetchResult(NamedTuple):
    records: list  # [ConsumerRecord]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    next_offset: int  # where the next fetch of this partition starts


class RawFetchResult(NamedTuple):
    topic: str
    partition: int
    offset: int  # the offset asked for
    records: object  # bytes-like (a memoryview of the response frame): concatenated record
    # batches as the broker sent them (v2, or v0/v1 message sets); may end in a partial batch
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list  # [(producer_id, first_offset)] (read_committed), else []
    error_code: int  # 0, or the partition's Kafka error code (multi_fetch_raw only)

    @property
    def error(self) -> PyklogError | None:
        return None if not self.error_code else wire_error(self.error_code, f"{self.topic}-{self.partition}")


def decode_records(
    topic: str,
    partition: int,
    buf,
    offset: int,
    *,
    isolation_level: int = 0,
    aborted_transactions=None,
    last_stable_offset: int = -1,
    validate_crc: bool = True,
) -> tuple[list, int]:
    """Decode a Fetch response's record bytes: ``(records, next_offset)``.

    Pure function; applies every rule in the module docstring.  ``next_offset`` is ``offset``
    when no complete batch was returned.
    """
    out = []
    append = out.append
    next_offset = offset
    committed = isolation_level == READ_COMMITTED
    aborted_heap = []
    aborting: set = set()
    if committed and aborted_transactions:
        aborted_heap = [(int(first), int(pid)) for pid, first in aborted_transactions]
        heapq.heapify(aborted_heap)
    stop_at = last_stable_offset if committed and last_stable_offset >= 0 else None
    for batch in iter_batches(buf, validate_crc=validate_crc):
        h = batch.header
        if stop_at is not None and h.base_offset >= stop_at:
            break
        if h.next_offset > next_offset:
            next_offset = h.next_offset
        if h.last_offset < offset:
            continue
        if committed and h.magic >= 2:
            if h.is_transactional:
                while aborted_heap and aborted_heap[0][0] <= h.last_offset:
                    aborting.add(heapq.heappop(aborted_heap)[1])
            if h.is_control:
                if batch.control_type == 0:  # ABORT marker ends the aborted transaction
                    aborting.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborting:
                continue
        elif h.is_control:
            continue
        tst = h.timestamp_type
        for r in batch.records:
            o = r.offset
            if o < offset or (stop_at is not None and o >= stop_at):
                continue
            append(ConsumerRecord(topic, partition, o, r.timestamp, tst, r.key, r.value, r.headers))
    if stop_at is not None and next_offset > stop_at:
        next_offset = max(offset, stop_at)
    return out, next_offset


class SimpleConsumer:
    """Low-level consumer: explicit offsets, one request per call.  Thread-safe.

    ``bootstrap_servers`` or ``zookeeper_connect`` (or an existing ``client`` to share).  Fetch
    settings: ``max_wait_ms`` (how long the broker may hold a fetch waiting for ``min_bytes``),
    ``min_bytes``, ``fetch_max_bytes`` (whole response), ``isolation_level``
    ("read_uncommitted" | "read_committed"), ``check_crcs``.
    """

    def __init__(
        self,
        bootstrap_servers=None,
        zookeeper_connect: str | None = None,
        *,
        client_id: str = "pyklog-simple-consumer",
        isolation_level="read_uncommitted",
        max_wait_ms: int = 100,
        min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        client: ClusterClient | None = None,
        sasl=None,
    ):
        if isinstance(isolation_level, str):
            isolation_level = isolation_level.replace(".", "_").lower()
        if isolation_level not in _ISOLATION:
            raise ConfigError(
                f"isolation.level: expected 'read_uncommitted' or 'read_committed', got {isolation_level!r}"
            )
        if max_wait_ms >= request_timeout_ms:
            raise ConfigError(f"max_wait_ms ({max_wait_ms}) must be below request_timeout_ms ({request_timeout_ms})")
        self.isolation_level = _ISOLATION[isolation_level]
        self.max_wait_ms = int(max_wait_ms)
        self.min_bytes = int(min_bytes)
        self.fetch_max_bytes = int(fetch_max_bytes)
        self.check_crcs = check_crcs
        self._owns_client = client is None
        self.client = client or ClusterClient(
            bootstrap_servers,
            zookeeper_connect,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            sasl=sasl,
        )
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self._known_leaders: dict = {}  # (t, p) -> (node_id, host, port), see use_leader

    # -- a leader known in advance -----------------------------------------------------------------
    def use_leader(self, topic: str, partition: int, node_id: int, host: str, port: int) -> None:
        """Fetch ``topic``/``partition`` from broker ``node_id`` at ``host:port`` without asking
        for metadata first (e.g. the leader a Spark planner found a moment ago).

        The first fetch then opens one connection to that broker (one ApiVersions handshake) and
        sends the Fetch on it.  If that broker answers NOT_LEADER_OR_FOLLOWER /
        UNKNOWN_TOPIC_OR_PARTITION (or another error after which metadata is stale), or cannot be
        reached, the hint is dropped with a log line and the partition's leader is looked up in
        the cluster metadata as usual (Kafka's clients do the same on these errors, see the
        protocol guide's "Client Requests" section).  Thread-safe (one dict entry per partition,
        replaced or dropped atomically)."""
        self._known_leaders[(topic, int(partition))] = (int(node_id), host, int(port))

    def _forget_leader(self, tp, why: str) -> None:
        hint = self._known_leaders.pop(tp, None)
        if hint is not None:
            log.info(
                "%s-%s: broker %d at %s:%d, the leader known in advance, %s; looking the leader "
                "up in the cluster metadata",
                tp[0],
                tp[1],
                hint[0],
                hint[1],
                hint[2],
                why,
            )

    def _leader_epoch(self, topic: str, partition: int) -> int:
        """``current_leader_epoch`` of a Fetch (KIP-320): the cached metadata's, or -1 (no check) when
        the leader is a hint from :meth:`use_leader` (its epoch is not known)."""
        if (topic, partition) in self._known_leaders:
            return -1
        return self.client.leader_epoch(topic, partition)

    # -- raw fetch --------------------------------------------------------------------------------
    def _fetch_body(self, version: int, parts: dict) -> dict:
        topics: dict = {}
        for (t, p), (off, mb) in parts.items():
            topics.setdefault(t, []).append(
                {
                    "partition": p,
                    "current_leader_epoch": self._leader_epoch(t, p),
                    "fetch_offset": off,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": mb,
                }
            )
        return {
            "replica_id": -1,
            "max_wait_ms": self.max_wait_ms,
            "min_bytes": self.min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "isolation_level": self.isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    def multi_fetch_raw(self, requests: dict, *, timeout_s: float | None = None) -> dict:
        """``{(t, p): (offset, max_bytes)}`` -> ``{(t, p): RawFetchResult}``.

        One Fetch per leader (a leader given to :meth:`use_leader` is used without a metadata
        lookup), all sent before any answer is read.  Leadership errors and
        connection failures refresh the metadata and retry those partitions (with backoff, up to
        ``timeout_s``); other partition errors come back in ``error_code``."""
        pending = {(t, int(p)): (int(o), int(mb)) for (t, p), (o, mb) in requests.items()}
        results: dict = {}
        deadline = time.monotonic() + (self.request_timeout_s if timeout_s is None else timeout_s)
        backoff = self.retry_backoff_s
        client = self.client
        while pending:
            retry_err = None
            hint_failed = False  # a known leader failed: look it up at once, without backoff
            sent = []
            by_node: dict = {}
            addresses: dict = {}  # node -> (host, port) of a known leader (no metadata needed)
            for tp in list(pending):
                hint = self._known_leaders.get(tp)
                if hint is not None:
                    by_node.setdefault(hint[0], {})[tp] = pending[tp]
                    addresses[hint[0]] = hint[1:]
                    continue
                try:
                    by_node.setdefault(client.leader_for(*tp, timeout_s=max(0.0, deadline - time.monotonic())), {})[
                        tp
                    ] = pending[tp]
                except PyklogError as e:
                    if not e.retriable:
                        results[tp] = RawFetchResult(tp[0], tp[1], pending.pop(tp)[0], b"", -1, -1, -1, [], e.code)
                    else:
                        retry_err = e
            for node, parts in by_node.items():
                try:
                    conn = client.connection(node, _address=addresses.get(node))
                    version = conn.version_for(ApiKey.FETCH)
                    cid = conn.send(ApiKey.FETCH, self._fetch_body(version, parts), version)
                    sent.append((node, conn, cid, parts))
                except NetworkError as e:
                    client.invalidate()
                    retry_err = e
                    hint_failed = any(tp in self._known_leaders for tp in parts) or hint_failed
                    for tp in parts:
                        self._forget_leader(tp, f"cannot be reached ({e})")
            for node, conn, cid, parts in sent:
                try:
                    resp = conn.receive(cid)
                except NetworkError as e:
                    client.invalidate()
                    retry_err = e
                    hint_failed = any(tp in self._known_leaders for tp in parts) or hint_failed
                    for tp in parts:
                        self._forget_leader(tp, f"cannot be reached ({e})")
                    continue
                top = int(resp.get("error_code", 0))
                if top:
                    retry_err = retriable_wire_error(top, f"Fetch from broker {node}")
                    for tp in parts:
                        self._forget_leader(tp, f"answered {type(retry_err).__name__}")
                    continue
                for t in resp.get("responses") or []:
                    topic = t.get("topic")
                    for p in t.get("partitions") or []:
                        tp = (topic, int(p["partition_index"]))
                        if tp not in pending:
                            continue
                        code = int(p.get("error_code", 0))
                        if code in REFRESH_METADATA_CODES:
                            client.invalidate()
                            retry_err = wire_error(code, f"Fetch {tp[0]}-{tp[1]} from broker {node}")
                            if tp in self._known_leaders:
                                self._forget_leader(tp, f"answered {type(retry_err).__name__}")
                                hint_failed = True
                            continue
                        aborted = p.get("aborted_transactions") or []
                        results[tp] = RawFetchResult(
                            tp[0],
                            tp[1],
                            pending.pop(tp)[0],
                            p.get("records") or b"",
                            int(p.get("high_watermark", -1)),
                            int(p.get("last_stable_offset", -1)),
                            int(p.get("log_start_offset", -1)),
                            [(int(a["producer_id"]), int(a["first_offset"])) for a in aborted],
                            code,
                        )
            if pending and hint_failed:
                continue
            if pending:
                if time.monotonic() + backoff > deadline:
                    raise retry_err or wire_error(3, f"Fetch: no answer for {sorted(pending)}")
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        return results

    def _raise_for(self, r: RawFetchResult) -> None:
        if not r.error_code:
            return
        if r.error_code == OffsetOutOfRangeError.code:
            raise self._out_of_range(r.topic, r.partition, r.offset)
        raise wire_error(r.error_code, f"Fetch {r.topic}-{r.partition} at offset {r.offset}")

    def _out_of_range(self, topic, partition, offset) -> OffsetOutOfRangeError:
        tp = (topic, partition)
        try:
            start = self.client.list_offsets({tp: EARLIEST})[tp]
            end = self.client.list_offsets({tp: LATEST})[tp]
        except PyklogError:
            start = end = None
        e = OffsetOutOfRangeError(
            f"OFFSET_OUT_OF_RANGE: offset {offset} of {topic}-{partition} is outside the log [{start}, {end}]"
        )
        e.topic, e.partition, e.offset = topic, partition, offset
        e.log_start_offset, e.log_end_offset = start, end
        return e

    def fetch_raw(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1048576, *, timeout_s: float | None = None
    ) -> RawFetchResult:
        """The raw record bytes of one partition from ``offset`` (error_code is always 0: errors
        raise, OffsetOutOfRangeError with ``log_start_offset``/``log_end_offset``).  A leader that
        went away (unreachable, NOT_LEADER_OR_FOLLOWER) is looked up again in fresh metadata, with
        backoff, for up to ``timeout_s`` (default request.timeout.ms)."""
        r = self.multi_fetch_raw({(topic, partition): (offset, max_bytes)}, timeout_s=timeout_s)[
            (topic, int(partition))
        ]
        self._raise_for(r)
        return r

    # -- decoded fetch ----------------------------------------------------------------------------
    def _decode(self, r: RawFetchResult, max_bytes: int) -> FetchResult:
        recs, nxt = decode_records(
            r.topic,
            r.partition,
            bytes(r.records),
            r.offset,
            isolation_level=self.isolation_level,
            aborted_transactions=r.aborted_transactions,
            last_stable_offset=r.last_stable_offset,
            validate_crc=self.check_crcs,
        )
        if (
            nxt == r.offset
            and not recs
            and len(r.records) > 0
            and r.high_watermark > r.offset
            and not (self.isolation_level and 0 <= r.last_stable_offset <= r.offset)
        ):
            raise MessageTooLargeError(
                f"MESSAGE_TOO_LARGE: {r.topic}-{r.partition} at offset {r.offset}: the first batch does "
                f"not fit in max_bytes={max_bytes} ({len(r.records)} bytes returned, no complete batch)"
            )
        return FetchResult(recs, r.high_watermark, r.last_stable_offset, r.log_start_offset, nxt)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1048576) -> FetchResult:
        """Records of ``topic``/``partition`` from ``offset`` (at most about ``max_bytes``)."""
        r = self.fetch_raw(topic, partition, offset, max_bytes)
        return self._decode(r, max_bytes)

    def multi_fetch(self, requests: dict, *, raise_errors: bool = True) -> dict:
        """``{(t, p): (offset, max_bytes)}`` -> ``{(t, p): FetchResult}`` in one request per leader.
        With ``raise_errors=False`` a failing partition maps to its exception instead."""
        raw = self.multi_fetch_raw(requests)
        out = {}
        for tp, r in raw.items():
            try:
                self._raise_for(r)
                out[tp] = self._decode(r, requests.get(tp, (0, 0))[1])
            except PyklogError as e:
                if raise_errors:
                    raise
                out[tp] = e
        return out

    def iter_records(
        self, topic: str, partition: int, offset: int, *, end_offset: int | None = None, max_bytes: int = 1048576
    ):
        """Yield records from ``offset`` until ``end_offset`` (default: the high watermark when
        the iteration started), fetching as needed."""
        if end_offset is None:
            end_offset = self.latest_offset(topic, partition)
        while offset < end_offset:
            r = self.fetch(topic, partition, offset, max_bytes)
            for rec in r.records:
                if rec.offset >= end_offset:
                    return
                yield rec
            if r.next_offset <= offset:
                if r.high_watermark <= offset or (self.isolation_level and r.last_stable_offset <= offset):
                    return
                continue
            offset = r.next_offset

    # -- offsets ----------------------------------------------------------------------------------
    def offsets_before(self, topic: str, partition: int, time_ms: int, max_num_offsets: int = 1) -> list[int]:
        """ListOffsets v0: up to ``max_num_offsets`` offsets (segment starts) before ``time_ms``;
        -1 = latest, -2 = earliest.  Descending, as the seed's getOffsetsBefore."""
        return self.client.offsets_before(topic, partition, time_ms, max_num_offsets)

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.client.list_offsets({(topic, partition): EARLIEST}, isolation_level=self.isolation_level)[
            (topic, partition)
        ]

    def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark (read_uncommitted) or last stable offset (read_committed)."""
        return self.client.list_offsets({(topic, partition): LATEST}, isolation_level=self.isolation_level)[
            (topic, partition)
        ]

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int):
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``, or None."""
        return self.client.offsets_for_times({(topic, partition): timestamp_ms}, isolation_level=self.isolation_level)[
            (topic, partition)
        ]

    def list_offsets(self, timestamps: dict) -> dict:
        """``{(t, p): timestamp | -1 | -2}`` -> ``{(t, p): offset | None}``."""
        return self.client.list_offsets(timestamps, isolation_level=self.isolation_level)

    def partitions_for(self, topic: str) -> list[int]:
        return self.client.partitions_for(topic)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
