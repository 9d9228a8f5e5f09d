"""Sending transaction markers: Kafka's ``TransactionMarkerChannelManager``.

Once a transaction's PrepareCommit / PrepareAbort is in ``__transaction_state``, the coordinator
hands it here (:meth:`TransactionMarkerChannelManager.add_txn_markers_to_send`).  One daemon thread
(``txn-marker-sender-N``) resolves the leader of each of the transaction's partitions from the
cluster metadata (:class:`broker.zk.cluster.ZkCluster`), groups them per broker and sends each
broker one ``WriteTxnMarkers`` v0 request for all its markers (the leader may be this broker: the
request then goes over the socket to itself, handled by its own request handlers).  Per partition:

* NONE: done.  UNSUPPORTED_FOR_MESSAGE_FORMAT: done (Kafka: nothing transactional can be there).
* The topic or partition no longer exists in the registry: dropped (the topic was deleted).
* No live leader, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a storage or unknown error,
  a connection failure or timeout: retried, the leader re-resolved each round, with per-broker
  exponential backoff (``retry_backoff_ms`` doubling up to 5 s) while a broker cannot be reached.
* INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: this coordinator is stale (a newer one
  has written to the partition); the transaction is left to it (Kafka's ``abortSending``).

When no partition is left, ``on_complete(pending)`` runs on the sender thread: the coordinator
writes CompleteCommit / CompleteAbort.  It returns False to be called again later (write failed).

Thread-safety: the public methods are thread-safe (one lock, ``_lock``, guards the pending table
and is never held during I/O); all network I/O is on the sender thread and its per-round pool.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyklog.broker.common.retry import Backoff
from pyklog.broker.common.sockets import recv_exact
from pyklog.broker.protocol import ApiKey, decode_response, encode_request

log = logging.getLogger(__name__)

_NONE = 0
_DONE_CODES = frozenset({0, 43})  # NONE, UNSUPPORTED_FOR_MESSAGE_FORMAT
_FENCED_CODES = frozenset({47, 52})  # INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED
_FATAL_CODES = frozenset({2, 10, 18, 21})  # Kafka: IllegalStateException; pyklog logs and keeps retrying


@dataclass
class PendingCompletion:
    """One transaction whose markers are being written (Kafka's ``PendingCompleteTxn``)."""

    transactional_id: str
    txn_partition: int  # its __transaction_state partition
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    remaining: set = field(default_factory=set)  # {(topic, partition)} without a marker yet
    attempts: int = 0
    done: bool = False


class _PeerConnection:
    """A blocking connection to one broker for WriteTxnMarkers (sender thread only)."""

    def __init__(self, host: str, port: int, timeout_s: float, client_id: str, connect):
        #: ``connect(host, port, timeout_s)`` -> a connected socket (the cluster's inter-broker connector)
        self.connect = connect
        self.addr = (host, port)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.sock: socket.socket | None = None
        self.cid = 0

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def request(self, api_key: int, version: int, body: dict) -> dict:
        if self.sock is None:
            self.sock = self.connect(self.addr[0], self.addr[1], self.timeout_s)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = (self.cid + 1) & 0x7FFFFFFF
        try:
            self.sock.sendall(encode_request(api_key, version, self.cid, self.client_id, body))
            (size,) = struct.unpack(">i", self._exact(4))
            cid, resp = decode_response(api_key, version, self._exact(size))
        except BaseException:
            self.close()
            raise
        if cid != self.cid:
            self.close()
            raise ConnectionError(f"correlation id {cid} in answer to {self.cid}")
        return resp

    def _exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n, f"{self.addr[0]}:{self.addr[1]} closed the connection")


class TransactionMarkerChannelManager:
    """See the module docstring.  ``cluster``: a started ZkCluster; ``on_complete(pending) -> bool``."""

    def __init__(
        self,
        cluster,
        broker_id: int,
        on_complete: Callable[[PendingCompletion], bool],
        *,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
    ):
        self.cluster = cluster
        self.broker_id = broker_id
        self.on_complete = on_complete
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self._lock = threading.Condition()
        self._pending: dict[str, PendingCompletion] = {}
        self._completions: list[PendingCompletion] = []  # all markers written, Complete* not yet
        self._conns: dict[int, _PeerConnection] = {}
        self._backoff: dict[int, tuple[Backoff, float]] = {}  # broker -> (backoff, not before monotonic)
        self._inflight: dict[int, tuple] = {}  # broker -> (future, sent partitions, transactions); sender thread
        self._running = False
        self._wakeup = False  # new work arrived since the current round began (no backoff wait then)
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"txn-marker-io-{broker_id}")
        self.markers_sent = 0  # partitions acknowledged (tests, logs)

    # ------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._run, name=f"txn-marker-sender-{self.broker_id}", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        with self._lock:
            self._running = False
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in list(self._conns.values()):
            c.close()

    # ------------------------------------------------------------------ API

    def add_txn_markers_to_send(self, pending: PendingCompletion) -> None:
        """Queue ``pending``'s markers (replaces an older entry of the same transactional id)."""
        with self._lock:
            if not pending.remaining:
                self._completions.append(pending)
            else:
                self._pending[pending.transactional_id] = pending
            self._wakeup = True
            self._lock.notify_all()

    def remove_markers_for_txn_partition(self, txn_partition: int) -> None:
        """The coordinator no longer leads ``txn_partition``: forget its transactions."""
        with self._lock:
            for tid in [t for t, p in self._pending.items() if p.txn_partition == txn_partition]:
                del self._pending[tid]
            self._completions = [c for c in self._completions if c.txn_partition != txn_partition]

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._completions)

    def is_pending(self, transactional_id: str) -> bool:
        with self._lock:
            return transactional_id in self._pending or any(
                c.transactional_id == transactional_id for c in self._completions
            )

    def remaining_partitions(self, transactional_id: str) -> frozenset | None:
        """The partitions of ``transactional_id``'s completing transaction still without their marker
        (DescribeTransactions in PrepareCommit/PrepareAbort, as Kafka reports them); an empty set once
        every marker is written, None when no completion of it is pending here.  Any thread."""
        with self._lock:
            p = self._pending.get(transactional_id)
            if p is not None:
                return frozenset(p.remaining)
            if any(c.transactional_id == transactional_id for c in self._completions):
                return frozenset()
            return None

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._running and not self._pending and not self._completions and not self._wakeup:
                    self._lock.wait()
                if not self._running:
                    return
                pending = list(self._pending.values())
                completions, self._completions = self._completions, []
                self._wakeup = False
            retry_completions = False
            try:
                retry_completions = self._complete(completions)
                if pending or self._inflight:
                    self._send_round(pending)
            except Exception:  # noqa: BLE001 - the sender thread must go on
                log.exception("transaction marker round failed")
            with self._lock:
                if self._running and retry_completions:
                    self._lock.wait(self.retry_backoff_s)  # a Complete* write failed: not in a busy loop
                elif self._running and not self._wakeup and not self._completions and self._pending:
                    self._lock.wait(self._next_wait())  # only failed partitions left: back off

    def _next_wait(self) -> float:
        now = time.monotonic()
        dues = [due - now for _, due in self._backoff.values() if due > now]
        return max(0.01, min([self.retry_backoff_s] + dues))

    def _complete(self, completions: list[PendingCompletion]) -> bool:
        """Write the completions; True when some must be tried again later."""
        failed = False
        for c in completions:
            ok = False
            try:
                ok = self.on_complete(c)
            except Exception:  # noqa: BLE001
                log.exception("writing the completion of transaction %r failed", c.transactional_id)
            if not ok:
                failed = True
                with self._lock:
                    if self._running:
                        self._completions.append(c)
        return failed

    def _send_round(self, pending: list[PendingCompletion]) -> None:
        """One pass: apply the answers that arrived, resolve leaders, then one WriteTxnMarkers per
        reachable broker that has no request in flight (sent on the I/O pool: a hung broker delays
        only its own partitions, by up to the request timeout)."""
        self._harvest()
        now = time.monotonic()
        live = self.cluster.live_brokers()
        by_broker: dict[int, dict[str, dict[tuple, None]]] = {}
        topic_cache: dict[str, dict | None] = {}
        for txn in pending:
            for tp in sorted(txn.remaining):
                topic, p = tp
                if topic not in topic_cache:
                    try:
                        topic_cache[topic] = self.cluster.topic(topic)
                    except Exception as e:  # noqa: BLE001 - ZooKeeper trouble: try again later
                        log.debug("cannot read topic %s: %s", topic, e)
                        topic_cache[topic] = {}
                parts = topic_cache[topic]
                if parts is None or (parts and p not in parts):
                    log.info(
                        "transaction %r: %s-%d no longer exists, no marker to write", txn.transactional_id, topic, p
                    )
                    self._partition_done(txn, tp)
                    continue
                st = parts.get(p)
                if st is None or st.leader < 0 or st.leader not in live:
                    continue  # no live leader: retried next round
                b = by_broker.setdefault(st.leader, {})
                b.setdefault(txn.transactional_id, {})[tp] = None
        for broker, txns in by_broker.items():
            if broker in self._inflight:
                continue
            bo = self._backoff.get(broker)
            if bo is not None and bo[1] > now:
                continue
            markers, sent_txns = [], []
            for txn in pending:
                tps = txns.get(txn.transactional_id)
                if not tps:
                    continue
                sent_txns.append(txn)
                topics: dict[str, list[int]] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append(p)
                markers.append(
                    {
                        "producer_id": txn.producer_id,
                        "producer_epoch": txn.producer_epoch,
                        "transaction_result": txn.commit,
                        "coordinator_epoch": txn.coordinator_epoch,
                        "topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(topics.items())],
                    }
                )
            fut = self._pool.submit(self._send, broker, live[broker], markers)
            self._inflight[broker] = (fut, txns, sent_txns)
            fut.add_done_callback(self._on_done)

    def _on_done(self, _fut) -> None:
        with self._lock:
            self._wakeup = True
            self._lock.notify_all()

    def _harvest(self) -> None:
        """Apply the answers (or failures) of the requests that completed (sender thread)."""
        for broker, (fut, sent, sent_txns) in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[broker]
            try:
                resp = fut.result()
            except Exception as e:  # noqa: BLE001 - unreachable broker: backoff
                bo, _ = self._backoff.get(broker) or (Backoff(self.retry_backoff_s, max_s=5.0, jitter=0.2), 0.0)
                delay = bo.next()
                self._backoff[broker] = (bo, time.monotonic() + delay)
                log.info("cannot send transaction markers to broker %d (%s); retrying in %.2fs", broker, e, delay)
                continue
            self._backoff.pop(broker, None)
            self._apply_response(broker, resp, sent, sent_txns)

    def _send(self, broker: int, addr: tuple[str, int], markers: list) -> dict:
        conn = self._conns.get(broker)
        if conn is None or conn.addr != tuple(addr):
            if conn is not None:
                conn.close()
            conn = self._conns[broker] = _PeerConnection(
                addr[0],
                addr[1],
                self.request_timeout_s,
                f"txn-coordinator-{self.broker_id}",
                self.cluster.connect_to_broker,
            )
        return conn.request(ApiKey.WRITE_TXN_MARKERS, 0, {"markers": markers})

    def _apply_response(self, broker: int, resp: dict, sent: dict, pending: list[PendingCompletion]) -> None:
        """Per partition of the answer: done, fenced (stop this transaction) or retried."""
        by_tid = {t.transactional_id: t for t in pending}
        pid_to_txns: dict[int, list[PendingCompletion]] = {}
        for tid in sent:
            pid_to_txns.setdefault(by_tid[tid].producer_id, []).append(by_tid[tid])
        for m in resp.get("markers") or []:
            for txn in pid_to_txns.get(m["producer_id"], []):
                for t in m.get("topics") or []:
                    for pr in t.get("partitions") or []:
                        tp = (t["name"], pr["partition_index"])
                        if tp not in sent.get(txn.transactional_id, {}):
                            continue
                        code = pr["error_code"]
                        if code in _DONE_CODES:
                            self.markers_sent += 1
                            self._partition_done(txn, tp)
                        elif code in _FENCED_CODES:
                            log.warning(
                                "transaction %r: broker %d answered error %d for %s-%d: a newer coordinator "
                                "owns it; stop sending its markers",
                                txn.transactional_id,
                                broker,
                                code,
                                *tp,
                            )
                            with self._lock:
                                if self._pending.get(txn.transactional_id) is txn:
                                    del self._pending[txn.transactional_id]
                        else:
                            txn.attempts += 1
                            level = logging.ERROR if code in _FATAL_CODES else logging.INFO
                            if code in _FATAL_CODES or txn.attempts in (1, 10, 100) or txn.attempts % 1000 == 0:
                                log.log(
                                    level,
                                    "transaction %r: marker for %s-%d on broker %d failed with error %d "
                                    "(attempt %d); retrying",
                                    txn.transactional_id,
                                    *tp,
                                    broker,
                                    code,
                                    txn.attempts,
                                )

    def _partition_done(self, txn: PendingCompletion, tp: tuple) -> None:
        with self._lock:
            txn.remaining.discard(tp)
            if not txn.remaining and not txn.done and self._pending.get(txn.transactional_id) is txn:
                txn.done = True
                del self._pending[txn.transactional_id]
                self._completions.append(txn)
                self._wakeup = True
                self._lock.notify_all()
