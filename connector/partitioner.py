"""Partitioners: where a produced record goes.

The default placement is Kafka's own, so a key lands on the same partition whichever client wrote
it (the Java client, librdkafka with ``partitioner=murmur2_random``, kafka-python, pyklog):

* a record with a key goes to ``to_positive(murmur2(key_bytes)) % num_partitions`` over *all*
  partitions of the topic (not only those with a leader), ``to_positive(n) = n & 0x7fffffff``;
* a record without a key is "sticky" (Kafka 2.4+, KIP-480): it goes to the partition the current
  batch is filling, and a new partition is picked at random when that batch closes, so null-key
  records form full batches instead of one small batch per partition.

``murmur2`` is Kafka's ``Utils.murmur2``: MurmurHash2, 32-bit, seed ``0x9747b28c``, little-endian
4-byte blocks, Java ``int`` overflow semantics; the result is a signed 32-bit int.

A custom partitioner is any callable ``partitioner(key_bytes, num_partitions) -> int`` (the seed's
``Partitioner.partition(key, numPartitions)``), or an object with such a ``partition`` method.

Pure code; :class:`DefaultPartitioner` keeps the sticky choice per topic and is thread-safe.
"""

from __future__ import annotations

import random
import struct
import threading

__all__ = [
    "murmur2",
    "murmur2_array",
    "to_positive",
    "partition_for_key",
    "DefaultPartitioner",
    "RoundRobinPartitioner",
]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(byte[])``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from("<%dI" % n4, data, 0):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_array(data, starts, lengths):
    """:func:`murmur2` of many byte strings at once, vectorised with numpy: the strings are the
    slices ``data[starts[i]:starts[i] + lengths[i]]`` of the uint8 array ``data``.  Returns the
    signed 32-bit hashes as an int32 array.

    Strings of one length are hashed together as the rows of a matrix (one numpy step per 4-byte
    block column), so the cost is a few numpy calls per distinct key length, not per key."""
    import numpy as np

    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.empty(len(starts), dtype=np.uint32)
    m = np.uint32(_M)
    for length in np.unique(lengths).tolist():
        idx = np.flatnonzero(lengths == length)
        h = np.full(len(idx), (_SEED ^ length) & _MASK, dtype=np.uint32)
        if length:
            rows = data[starts[idx][:, None] + np.arange(length, dtype=np.int64)]  # (keys, length) uint8
            n4 = length >> 2
            if n4:
                blocks = np.ascontiguousarray(rows[:, : n4 * 4]).view("<u4")
                for j in range(n4):
                    k = blocks[:, j] * m
                    k ^= k >> np.uint32(24)
                    k *= m
                    h *= m
                    h ^= k
            tail = length & 3
            if tail:
                base = length & ~3
                if tail == 3:
                    h ^= rows[:, base + 2].astype(np.uint32) << np.uint32(16)
                if tail >= 2:
                    h ^= rows[:, base + 1].astype(np.uint32) << np.uint32(8)
                h ^= rows[:, base].astype(np.uint32)
                h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        out[idx] = h
    return out.view(np.int32)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class DefaultPartitioner:
    """Kafka's default: murmur2 for keyed records, sticky random partition for null keys.

    ``partition(topic, key_bytes, num_partitions, available=None)``: ``available`` is the list of
    partitions that currently have a leader (null keys prefer those).  The producer calls
    :meth:`on_new_batch` when the sticky partition's batch closed so the next null-key record
    moves on.  Thread-safe.
    """

    def __init__(self, rng: random.Random | None = None):
        self._sticky: dict[str, int] = {}
        self._rng = rng or random.Random()
        self._lock = threading.Lock()

    def partition(self, topic: str, key: bytes | None, num_partitions: int, available=None) -> int:
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % num_partitions
        p = self._sticky.get(topic)
        if p is None or p >= num_partitions:
            p = self._choose(topic, num_partitions, available, None)
        return p

    def on_new_batch(self, topic: str, num_partitions: int, prev_partition: int, available=None) -> None:
        """The batch of ``prev_partition`` closed: pick another sticky partition for ``topic``."""
        if self._sticky.get(topic) == prev_partition:
            self._choose(topic, num_partitions, available, prev_partition)

    def _choose(self, topic, num_partitions, available, avoid) -> int:
        with self._lock:
            pool = list(available) if available else list(range(num_partitions))
            if avoid is not None and len(pool) > 1:
                pool = [p for p in pool if p != avoid] or pool
            p = pool[self._rng.randrange(len(pool))]
            self._sticky[topic] = p
            return p


class RoundRobinPartitioner:
    """Null and non-null keys alike spread round-robin over the partitions (Kafka's
    ``RoundRobinPartitioner``), a counter per topic.  Thread-safe (GIL-atomic counter update
    under a lock)."""

    def __init__(self):
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, key: bytes | None, num_partitions: int, available=None) -> int:
        with self._lock:
            n = self._counters.get(topic, 0)
            self._counters[topic] = n + 1
        if available:
            return sorted(available)[n % len(available)]
        return n % num_partitions

    def on_new_batch(self, topic, num_partitions, prev_partition, available=None) -> None:
        pass


def resolve_partitioner(spec):
    """Turn the ``partitioner`` config value into an object with ``partition(topic, key, n,
    available)`` and ``on_new_batch(...)``.

    Accepted: None / "default" / "murmur2" / "sticky" (the default), "round_robin", an object with
    ``partition(topic, key, num_partitions, available)``, or a plain callable
    ``f(key_bytes, num_partitions) -> int`` (the seed's Partitioner interface).
    """
    from pyklog.broker.errors import ConfigError

    if spec is None or spec in ("default", "murmur2", "sticky", "murmur2_random"):
        return DefaultPartitioner()
    if spec in ("round_robin", "roundrobin"):
        return RoundRobinPartitioner()
    if isinstance(spec, str):
        raise ConfigError(
            f"partitioner: expected 'default', 'round_robin', a callable or an object with partition(), got {spec!r}"
        )
    if hasattr(spec, "partition") and callable(spec.partition):
        if not hasattr(spec, "on_new_batch"):
            return _Wrapped(spec.partition, with_topic=True)
        return spec
    if callable(spec):
        return _Wrapped(spec, with_topic=False)
    raise ConfigError(f"partitioner: expected a callable or an object with partition(), got {spec!r}")


class _Wrapped:
    def __init__(self, fn, with_topic: bool):
        self._fn = fn
        self._with_topic = with_topic

    def partition(self, topic, key, num_partitions, available=None):
        if self._with_topic:
            return self._fn(topic, key, num_partitions, available)
        return self._fn(key, num_partitions)

    def on_new_batch(self, topic, num_partitions, prev_partition, available=None):
        pass
