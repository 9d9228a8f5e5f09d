"""The producer's sender thread: Kafka's ``Sender`` (``org.apache.kafka.clients.producer.internals``).

One background thread per producer.  Each step it drains closed and lingered batches from the
:class:`~pyklog.connector.producer.accumulator.RecordAccumulator` into per-partition send queues,
encodes each queue's head as a v2 record batch (:func:`broker.record.batch.build_batch`, with the
producer id, epoch and sequence the
:class:`~pyklog.connector.producer.transaction_manager.TransactionManager` assigns when idempotent),
groups batches by partition leader into Produce requests (one batch per partition per request, at
most ``max.request.size``), pipelines up to ``max.in.flight.requests.per.connection`` requests per
broker, reads the responses, and completes, retries or fails each batch.

Retries: a retriable error (NOT_LEADER_OR_FOLLOWER, a dropped connection, ...) refreshes the
metadata and requeues the batch after ``retry.backoff.ms``, up to ``retries`` attempts and within
``delivery.timeout.ms``.  With idempotence a requeued batch keeps its sequence and goes back in
sequence order; a partition's later batches wait until its earlier ones are resolved.

Thread-safety and locking: every attribute here belongs to the sender thread, except ``idle``
(written by the sender, read by appending threads to decide whether to wake it: a stale read only
costs one extra wakeup or one linger.ms wait) and :meth:`wakeup` (any thread).  The sender takes
the accumulator's lock only inside the accumulator's own methods, and each batch's future
Condition only in :func:`~pyklog.connector.producer.future.resolve_all`; it never holds two locks.
:meth:`close` runs on the closing thread after the sender thread has stopped.
"""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import threading
import time
from functools import partial

from pyklog.broker.errors import (
    ConcurrentTransactionsError,
    ConfigError,
    DuplicateSequenceError,
    NetworkError,
    OutOfOrderSequenceError,
    PyklogError,
    RequestTimedOutError,
    UnknownProducerIdError,
    UnsupportedVersionError,
    error_for_code,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.bulk import RecordsSection
from pyklog.connector.client import REFRESH_METADATA_CODES, BrokerConnection
from pyklog.connector.producer.accumulator import ProducerBatch
from pyklog.connector.producer.future import RecordMetadata, resolve_all
from pyklog.connector.producer.transaction_manager import TransactionAbortedError

log = logging.getLogger(__name__)

__all__ = ["Sender"]


class _InFlight:
    """One Produce request awaiting its response."""

    __slots__ = ("cid", "batches", "sent_at")

    def __init__(self, cid, batches, sent_at):
        self.cid = cid
        self.batches = batches
        self.sent_at = sent_at


class Sender:
    """The background thread that sends the accumulator's batches (see the module docstring)."""

    def __init__(self, client, accumulator, txn, cfg: dict, topic_info: dict, name: str):
        self.client = client
        self.accumulator = accumulator
        self.txn = txn
        self.topic_info = topic_info
        self._acks = cfg["acks"]
        self._max_request_size = cfg["max.request.size"]
        self._retries = cfg["retries"]
        self._backoff_s = cfg["retry.backoff.ms"] / 1000.0
        self._delivery_timeout_s = cfg["delivery.timeout.ms"] / 1000.0
        self._request_timeout_ms = cfg["request.timeout.ms"]
        self._max_in_flight = cfg["max.in.flight.requests.per.connection"]
        self._codec = cfg["compression.type"]
        self._auto_create = cfg["allow.auto.create.topics"]
        self.failed_records = 0
        self._add_retries = 0  # AddPartitionsToTxn retries in a row
        self._queues: dict[tuple, collections.deque] = {}
        self._tp_inflight: dict[tuple, int] = collections.defaultdict(int)
        self._tp_retrying: set = set()
        self._conns: dict[int, BrokerConnection] = {}
        self._conn_fds: dict[int, int] = {}
        self._inflight: dict[int, collections.deque] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.idle = False
        self._running = True
        self.fault_after_send = None  # fault injection hook for tests: fn(node_id, conn)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # ------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def wakeup(self) -> None:
        """Wake the sender from its select (any thread)."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def close(self, exc: Exception) -> None:
        """Stop the thread (it drains everything once more), fail what is still unsent with
        ``exc``, close connections.  Closing thread."""
        self._running = False
        self.wakeup()
        self._thread.join(30)
        self.fail_everything(exc)
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        try:
            while self._running:
                self._sender_step()
        except BaseException as e:  # noqa: BLE001 - report, fail what is queued
            log.exception("producer sender thread died")
            self.fail_everything(e if isinstance(e, Exception) else RuntimeError(str(e)))
            raise

    def _sender_step(self) -> None:
        now = time.monotonic()
        next_wake = self._drain_accumulator(now)
        self._send_ready(now)
        # wait for responses, the wakeup socket, the next linger deadline or retry time
        timeout = next_wake - time.monotonic()
        retry_at = min((q[0].retry_at for q in self._queues.values() if q and q[0].retry_at), default=None)
        add_at = self.txn.add_partitions_retry_at
        if add_at and (retry_at is None or add_at < retry_at):
            retry_at = add_at
        if retry_at is not None:
            timeout = min(timeout, retry_at - time.monotonic())
        pending = any(self._inflight.values())
        if any(q for q in self._queues.values()) and not pending:
            timeout = min(timeout, self._backoff_s)
        timeout = max(0.0, min(timeout, 0.5))
        self.idle = True
        if not self._running or self.accumulator.has_ready():
            timeout = 0.0
        if pending and any(c.buffered() for c in self._conns.values()):
            timeout = 0.0  # TLS holds bytes of a response already: read them without waiting
        events = self._selector.select(timeout) if timeout > 0 or pending else []
        self.idle = False
        for key, _mask in events:
            if key.data is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            else:
                self._read_responses(key.data)
        for node, conn in list(self._conns.items()):
            if self._inflight.get(node) and conn.buffered():
                self._read_responses(node)
        self._check_timeouts()

    def _drain_accumulator(self, now: float) -> float:
        """Move closed and lingered batches to the per-partition send queues; return when the
        next open batch's linger.ms expires."""
        taken, next_wake = self.accumulator.drain(now, not self._running)
        queues = self._queues
        for b in taken:
            tp = (b.topic, b.partition)
            q = queues.get(tp)
            if q is None:
                q = queues[tp] = collections.deque()
            q.append(b)
        return next_wake

    # ------------------------------------------------------------------------------- completion
    def _complete(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if b.futures:
            resolve_all(b.cond, b.futures, (b.topic, b.partition, base_offset, log_append_time), None)
        if b.callbacks:
            topic, partition, records = b.topic, b.partition, b.records
            for idx, cb in b.callbacks:
                ts = records[idx][2] if log_append_time < 0 else log_append_time
                md = RecordMetadata(topic, partition, base_offset + idx if base_offset >= 0 else -1, ts)
                try:
                    cb(md, None)
                except Exception:
                    log.exception("producer callback raised")
        self.accumulator.deallocate(b)

    def _fail(self, b: ProducerBatch, exc: Exception) -> None:
        if isinstance(exc, TransactionAbortedError):
            log.debug("not sending %d records to %s-%d: %s", len(b.records), b.topic, b.partition, exc)
        else:
            log.warning("failed to deliver %d records to %s-%d: %s", len(b.records), b.topic, b.partition, exc)
        self.txn.batch_failed(b, exc)
        if b.futures:
            resolve_all(b.cond, b.futures, None, exc)
        for _idx, cb in b.callbacks:
            try:
                cb(None, exc)
            except Exception:
                log.exception("producer callback raised")
        self.failed_records += len(b.records)
        self.accumulator.deallocate(b)

    def fail_everything(self, exc: Exception) -> None:
        """Fail every batch not yet resolved: undrained, queued and in flight."""
        batches = self.accumulator.abort_undrained()
        for q in self._queues.values():
            batches.extend(q)
            q.clear()
        for dq in self._inflight.values():
            for inf in dq:
                batches.extend(inf.batches.values())
            dq.clear()
        seen = set()
        for b in batches:
            if id(b) not in seen and b.records is not None:
                seen.add(id(b))
                self._fail(b, exc)

    def fail_unsent(self, bound, exc: Exception) -> None:
        """Fail every batch with an id <= ``bound`` that is not in flight (undrained or queued):
        a transaction is being aborted or cannot commit.  Sender thread."""
        batches = self.accumulator.abort_undrained(bound)
        for q in self._queues.values():
            if q and any(b.bid <= bound for b in q):
                keep = [b for b in q if b.bid > bound]
                batches.extend(b for b in q if b.bid <= bound)
                q.clear()
                q.extend(keep)
        for b in batches:
            if b.records is not None:
                self._fail(b, exc)
        for tp in [tp for tp in self._tp_retrying if not self._queues.get(tp) and not self._tp_inflight[tp]]:
            self._tp_retrying.discard(tp)  # nothing of it left to resend in order

    # ------------------------------------------------------------------------------- transactions
    def _add_partitions(self, tps, now: float) -> None:
        """AddPartitionsToTxn for the partitions of this drain that are not yet in the
        transaction (one request for all of them, as Kafka's sender does).  A retriable error is
        retried after retry.backoff.ms (20 ms for CONCURRENT_TRANSACTIONS before the first partition
        is in: the previous transaction is still writing its markers, as Kafka does; pyklog starts
        at 2 ms and doubles up to that 20 ms, since a coordinator on the same host completes a
        transaction within a few milliseconds)."""
        txn = self.txn
        if txn.add_partitions_retry_at > now:
            return
        try:
            txn.add_partitions_once(self.client, tps)
        except PyklogError as e:
            if e.retriable:
                self._add_retries += 1
                if isinstance(e, ConcurrentTransactionsError) and not txn.partitions_in_txn:
                    delay = min(0.002 * 2 ** (self._add_retries - 1), 0.02, self._backoff_s)
                else:
                    delay = self._backoff_s
                txn.add_partitions_retry_at = now + delay
                log.debug("AddPartitionsToTxn %s: retrying in %.3fs: %s", sorted(tps), delay, e)
                return
            log.warning("AddPartitionsToTxn %s failed: %s", sorted(tps), e)
            return
        self._add_retries = 0
        txn.add_partitions_retry_at = 0.0

    # ------------------------------------------------------------------------------- sending
    def _build(self, b: ProducerBatch) -> None:
        txn = self.txn
        records = b.records
        # a RecordsSection (bulk-encoded records, Producer.send_sections) only needs its header
        build = records.to_batch if type(records) is RecordsSection else partial(build_batch, records)
        if not txn.idempotent:
            b.data = build(compression=self._codec)
            return
        tp = (b.topic, b.partition)
        seq = txn.sequence_number(tp)
        # number the batch only once it is built: a batch that cannot be encoded leaves no gap
        b.data = build(
            compression=self._codec,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            base_sequence=seq,
            is_transactional=txn.transactional,
        )
        txn.assign_sequences(b, tp, seq)

    def _leader(self, topic: str, partition: int):
        leader = self.client.cached_leader(topic, partition)
        if leader is not None:
            return leader
        try:
            md = self.client.metadata([topic], refresh=True, auto_create=self._auto_create)
        except PyklogError as e:
            log.debug("metadata refresh failed: %s", e)
            return None
        tm = md.topics.get(topic)
        if tm is not None and tm.partitions and not tm.error_code:
            avail = sorted(p for p, pm in tm.partitions.items() if pm.leader >= 0)
            self.topic_info[topic] = (len(tm.partitions), avail)
            pm = tm.partitions.get(partition)
            if pm is not None and pm.leader >= 0:
                return pm.leader
        return None

    def _connection(self, node: int) -> BrokerConnection | None:
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = self.client.new_connection(node)
        except PyklogError as e:
            log.info("cannot connect to broker %d: %s", node, e)
            self.client.invalidate()
            return None
        self._conns[node] = conn
        fd = conn.fileno()
        stale = self._selector.get_map().get(fd)
        if stale is not None:  # a closed connection's fd, reused by the OS
            self._selector.unregister(fd)
        self._selector.register(fd, selectors.EVENT_READ, node)
        self._conn_fds[node] = fd
        self._inflight.setdefault(node, collections.deque())
        return conn

    def _drop_connection(self, node: int, exc: Exception) -> None:
        conn = self._conns.pop(node, None)
        fd = self._conn_fds.pop(node, None)
        if fd is not None:
            try:
                self._selector.unregister(fd)  # by fd: the socket may already be closed
            except (KeyError, ValueError):
                pass
        if conn is not None:
            conn.close()
        self.client.invalidate()
        dq = self._inflight.get(node)
        if dq:
            reqs = list(dq)
            dq.clear()
            for inf in reqs:
                for tp, b in inf.batches.items():
                    self._tp_inflight[tp] -= 1
                    self._retry_or_fail(b, exc)

    def _send_ready(self, now: float) -> None:
        txn = self.txn
        if txn.transactional:
            failing = txn.unsent_failure()
            if failing is not None:
                self.fail_unsent(*failing)
        if not any(self._queues.values()):
            return
        if txn.transactional:
            if not txn.may_send():
                return  # no transaction open (stragglers wait for the next one or an abort)
            new = [tp for tp in self._queues if tp not in txn.partitions_in_txn and self._sendable(tp, now)]
            if new:
                self._add_partitions(new, now)
                failing = txn.unsent_failure()
                if failing is not None:
                    self.fail_unsent(*failing)
                    return
        if txn.reset_pending and not txn.transactional:
            if not txn.maybe_reset_producer_id(any(self._inflight.values()), self._queues.values()):
                self._tp_retrying.clear()
        if txn.idempotent and txn.producer_id < 0:
            try:
                txn.ensure_producer_id(self.client)
            except PyklogError as e:
                if not e.retriable:
                    self.fail_everything(e)
                    return
                log.info("InitProducerId failed, retrying: %s", e)
                return
        by_node: dict[int, list] = {}
        in_txn = txn.partitions_in_txn if txn.transactional else None
        for tp in list(self._queues):
            if not self._sendable(tp, now):
                continue
            if in_txn is not None and tp not in in_txn:
                continue  # AddPartitionsToTxn first
            node = self._leader(*tp)
            if node is None:
                self._queues[tp][0].retry_at = now + self._backoff_s
                continue
            by_node.setdefault(node, []).append(tp)
        for node, tps in by_node.items():
            while True:
                tps = [tp for tp in tps if self._sendable(tp, now)]
                if not tps:
                    break
                dq = self._inflight.get(node)
                if dq is not None and len(dq) >= self._max_in_flight:
                    break
                conn = self._connection(node)
                if conn is None:
                    for tp in tps:
                        self._queues[tp][0].retry_at = now + self._backoff_s
                    break
                dq = self._inflight[node]
                batches = {}
                size = 0
                for tp in tps:
                    q = self._queues[tp]
                    b = q[0]
                    if b.data is None:
                        try:
                            self._build(b)
                        except Exception as e:  # noqa: BLE001 - bad header key etc.: fail this batch only
                            q.popleft()
                            self._fail(
                                b,
                                e
                                if isinstance(e, PyklogError)
                                else ConfigError(f"cannot encode a record batch for {tp[0]}-{tp[1]}: {e}"),
                            )
                            continue
                    bsize = len(b.data) + 64
                    if batches and size + bsize > self._max_request_size:
                        continue
                    q.popleft()
                    batches[tp] = b
                    size += bsize
                if batches:
                    self._send_request(node, conn, dq, batches, now)
                if conn.closed:
                    break

    def _sendable(self, tp, now: float) -> bool:
        q = self._queues.get(tp)
        if not q:
            return False
        b = q[0]
        if b.retry_at and b.retry_at > now:
            return False
        if b.data is None and self.txn.reset_pending:
            return False  # numbered under the next producer id
        # resend in sequence order once the earlier batches of tp are resolved
        return not (tp in self._tp_retrying and self._tp_inflight[tp] > 0)

    def _send_request(self, node, conn, dq, batches, now) -> None:
        topics: dict = {}
        for (t, p), b in batches.items():
            b.attempts += 1
            b.retry_at = 0.0
            topics.setdefault(t, []).append({"index": p, "records": b.data})
        body = {
            "transactional_id": self.txn.transactional_id,
            "acks": self._acks,
            "timeout_ms": self._request_timeout_ms,
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()],
        }
        try:
            version = conn.version_for(ApiKey.PRODUCE)
            if version < 3:
                raise UnsupportedVersionError(f"broker {node} has no Produce v3+ (record batch v2)")
            cid = conn.send(ApiKey.PRODUCE, body, version, expect_response=self._acks != 0)
        except NetworkError as e:
            for b in batches.values():
                self._retry_or_fail(b, e)
            self._drop_connection(node, e)
            return
        except UnsupportedVersionError as e:
            for b in batches.values():
                self._fail(b, e)
            return
        if self._acks == 0:
            for b in batches.values():
                self._complete(b, -1, -1)
            return
        for tp in batches:
            self._tp_inflight[tp] += 1
        dq.append(_InFlight(cid, batches, now))
        hook = self.fault_after_send
        if hook is not None:
            hook(node, conn)

    # ------------------------------------------------------------------------------- responses
    def _read_responses(self, node: int) -> None:
        conn = self._conns.get(node)
        dq = self._inflight.get(node)
        if conn is None or not dq:
            if conn is not None and not dq:
                # readable with nothing in flight: the broker closed the connection
                self._drop_connection(node, NetworkError(f"broker {node} closed an idle connection"))
            return
        inf = dq[0]
        try:
            resp = conn.receive(inf.cid)
        except NetworkError as e:
            self._drop_connection(node, e)
            return
        dq.popleft()
        self._handle_response(node, inf, resp)

    def _handle_response(self, node: int, inf: _InFlight, resp: dict) -> None:
        seen = set()
        for t in resp.get("responses") or []:
            name = t["name"]
            for p in t.get("partition_responses") or []:
                tp = (name, int(p["index"]))
                b = inf.batches.get(tp)
                if b is None or tp in seen:
                    continue
                seen.add(tp)
                self._tp_inflight[tp] -= 1
                code = int(p.get("error_code", 0))
                if code == 0:
                    self._complete(b, int(p["base_offset"]), int(p.get("log_append_time_ms", -1)))
                    self._maybe_end_retrying(tp)
                elif code == DuplicateSequenceError.code:
                    self._complete(b, int(p.get("base_offset", -1)), int(p.get("log_append_time_ms", -1)))
                    self._maybe_end_retrying(tp)
                else:
                    msg = p.get("error_message") or ""
                    exc = error_for_code(
                        code, f"{error_for_code(code).name}: Produce to {tp[0]}-{tp[1]} on broker {node} {msg}".rstrip()
                    )
                    if code in REFRESH_METADATA_CODES:
                        self.client.invalidate()
                    self._retry_or_fail(b, exc)
        for tp, b in inf.batches.items():
            if tp not in seen:
                self._tp_inflight[tp] -= 1
                self._retry_or_fail(b, NetworkError(f"broker {node} did not answer for {tp[0]}-{tp[1]}"))

    def _maybe_end_retrying(self, tp) -> None:
        if tp in self._tp_retrying and self._tp_inflight[tp] == 0:
            q = self._queues.get(tp)
            if not q or q[0].attempts == 0:
                self._tp_retrying.discard(tp)

    def _retry_or_fail(self, b: ProducerBatch, exc: PyklogError) -> None:
        tp = (b.topic, b.partition)
        now = time.monotonic()
        retriable = getattr(exc, "retriable", False)
        idempotent = self.txn.idempotent
        if idempotent and b.base_sequence >= 0 and isinstance(exc, (OutOfOrderSequenceError, UnknownProducerIdError)):
            if self.txn.batch_rejected(b, exc):
                retriable = True  # not in the log: sent again under the next producer id
            elif tp in self._tp_retrying:
                retriable = True  # an earlier batch of tp is being resent: this one follows it again
        if retriable and b.attempts <= self._retries and now - b.created < self._delivery_timeout_s:
            log.debug("retrying %s-%d (attempt %d): %s", b.topic, b.partition, b.attempts, exc)
            b.retry_at = now + self._backoff_s
            q = self._queues.setdefault(tp, collections.deque())
            if idempotent:
                self._tp_retrying.add(tp)
                # keep the partition's order (creation order = sequence order)
                items = list(q)
                items.append(b)
                items.sort(key=lambda x: x.bid)
                q.clear()
                q.extend(items)
            else:
                q.appendleft(b)
            return
        if retriable and now - b.created >= self._delivery_timeout_s:
            exc = RequestTimedOutError(
                f"REQUEST_TIMED_OUT: delivery.timeout.ms expired for "
                f"{b.topic}-{b.partition} after {b.attempts} attempts: {exc}"
            )
        self._fail(b, exc)

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        limit = self._request_timeout_ms / 1000.0 + 1.0
        for node, dq in list(self._inflight.items()):
            if dq and now - dq[0].sent_at > limit:
                self._drop_connection(
                    node,
                    RequestTimedOutError(
                        f"REQUEST_TIMED_OUT: no Produce response from broker {node} within request.timeout.ms"
                    ),
                )
        # batches that cannot be sent (no leader) expire after delivery.timeout.ms
        for tp, q in self._queues.items():
            while q and now - q[0].created >= self._delivery_timeout_s:
                b = q.popleft()
                self._fail(
                    b,
                    RequestTimedOutError(
                        f"REQUEST_TIMED_OUT: {tp[0]}-{tp[1]}: not delivered within "
                        f"delivery.timeout.ms after {b.attempts} attempts"
                    ),
                )
