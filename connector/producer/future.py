"""What ``Producer.send()`` returns: :class:`FutureRecordMetadata` resolving to :class:`RecordMetadata`.

Kafka's names (``RecordMetadata``, ``FutureRecordMetadata`` in ``org.apache.kafka.clients.producer``):
the metadata of one acknowledged record, and the future of it.  The futures of one record batch
share one :class:`threading.Condition` and are completed together by :func:`resolve_all` on the
sender thread; any thread may wait on them.
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import NamedTuple

__all__ = ["RecordMetadata", "FutureRecordMetadata", "resolve_all"]


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0 (unknown)
    timestamp: int  # CreateTime given/stamped, or the broker's LogAppendTime


class FutureRecordMetadata(Future):
    """The Future ``send()`` returns: a :class:`concurrent.futures.Future` resolving to
    :class:`RecordMetadata`.

    Made for bulk use: the futures of one batch share one Condition and are completed together
    under it (one lock round and one ``notify_all`` per batch instead of per record), and the
    RecordMetadata is built only when asked for.  Waiting, ``result()``, ``exception()``,
    ``add_done_callback()`` and ``concurrent.futures.wait`` / ``as_completed`` behave as for any
    Future.  A queued record cannot be cancelled: ``cancel()`` returns False.

    Thread-safe as any Future: its state changes only under the shared Condition (an RLock).
    """

    __slots__ = ("_condition", "_state", "_exception", "_w", "_cb", "_idx", "_ts", "_done")

    def __init__(self, condition, idx: int = 0, ts: int = -1):  # noqa: D107 - not calling Future.__init__
        self._condition = condition
        self._state = PENDING
        self._exception = None
        self._w = None
        self._cb = None
        self._idx = idx
        self._ts = ts
        self._done = None  # (topic, partition, base_offset, log_append_time) shared by the batch

    @property
    def _result(self):
        d = self._done
        if d is None or d.__class__ is RecordMetadata:
            return d
        base = d[2]
        return RecordMetadata(d[0], d[1], base + self._idx if base >= 0 else -1, self._ts if d[3] < 0 else d[3])

    @_result.setter
    def _result(self, value):
        self._done = value

    # Future keeps two lists per instance; most record futures never need them
    @property
    def _waiters(self):
        if self._w is None:
            self._w = []
        return self._w

    @property
    def _done_callbacks(self):
        if self._cb is None:
            self._cb = []
        return self._cb

    def cancel(self) -> bool:
        return False


def resolve_all(cond, futures, done, exc) -> None:
    """Complete the ``futures`` of one batch (they share ``cond``) with the batch's ``done``
    tuple ``(topic, partition, base_offset, log_append_time)`` or ``exc``: states under the lock,
    one notify_all, then done-callbacks outside it (as Future.set_result does)."""
    with cond:
        for fut in futures:
            if fut._state != PENDING:
                continue
            if exc is None:
                fut._done = done
            else:
                fut._exception = exc
            fut._state = FINISHED
            if fut._w:
                for w in fut._w:
                    if exc is None:
                        w.add_result(fut)
                    else:
                        w.add_exception(fut)
        cond.notify_all()
    for fut in futures:
        if fut._cb:
            fut._invoke_callbacks()
