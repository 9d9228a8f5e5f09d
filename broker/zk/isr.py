"""A partition leader's writes of its partition's state node: the ISR (Kafka's
``Partition.updateIsr`` through ``KafkaZkClient.conditionalUpdatePath``).

``/brokers/topics/[topic]/partitions/[p]/state`` -> ``{"controller_epoch","leader","version",
"leader_epoch","isr"}``: the controller alone changes leader and leader_epoch; a partition's leader
changes only the ISR, conditionally on the node's version, then writes
``/isr_change_notification/isr_change_<seq>`` so the controller propagates it.

Thread-safety: thread-safe; any thread, blocking.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from pyklog.broker.errors import PyklogError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.metadata_cache import ZkMetadataCache
from pyklog.broker.zk.session import ZkSession
from pyklog.broker.zk.znodes import (
    LeaderAndIsr,
    decode_partition_state,
    encode_isr_change_notification,
    encode_partition_state,
)

log = logging.getLogger(__name__)


class IsrWriter:
    """Reads a partition's state node and writes broker ``broker_id``'s ISR changes into it, keeping
    ``cache`` in step with what it wrote."""

    def __init__(self, session: ZkSession, cache: ZkMetadataCache, broker_id: int | None):
        self.session = session
        self.cache = cache
        self.broker_id = broker_id

    def partition_state(self, topic: str, partition: int) -> tuple[LeaderAndIsr, int] | None:
        """The state node of a partition read from ZooKeeper now, with its version (Kafka's
        ``getTopicPartitionState``/``zkVersion``); None if it does not exist."""
        path = paths.partition_state(topic, partition)
        try:
            data, stat = self.session.retry(self.session.zk.get, path)
        except NoNodeError:
            return None
        return decode_partition_state(data, path), stat.version

    def update_isrs(self, changes: list) -> dict:
        """Many ISR changes at once (Kafka's AlterPartition batches them the same way): ``changes``
        are ``(topic, partition, leader_epoch, isr, zk_version)``; returns ``{(topic, partition):
        v}``: the node's new version if written, None if this broker no longer leads the partition
        at that epoch (or it is gone), -1 if the node's version is no longer ``zk_version`` (nothing
        written: the caller decides again, e.g. through :meth:`update_isr` and its conflict rules).
        Each state node is written conditionally on its version; a node whose content at that
        version this broker last read or wrote itself (its controller epoch, which the write keeps)
        is written at once, the others are read first (one pipelined round each).  One
        ``isr_change_notification`` names every partition written: a broker rejoining thousands of
        ISRs costs a round trip or two, not three per partition.  Any thread; blocking."""
        out: dict = {}
        if not changes:
            return out
        zk = self.session.zk
        writes = []  # (change, the controller epoch its node holds and the write keeps)
        unknown = []
        for c in changes:
            topic, partition, leader_epoch, _isr, zk_version = c
            controller_epoch = self.cache.controller_epoch_at(
                topic, partition, zk_version, self.broker_id, leader_epoch
            )
            if controller_epoch is None:
                unknown.append(c)
            else:
                writes.append((c, controller_epoch))

        def read():
            pending = [(c, zk.get_async(paths.partition_state(c[0], c[1]))) for c in unknown]
            got = []
            for c, res in pending:
                try:
                    data, stat = res.get()
                except NoNodeError:
                    got.append((c, None, None))
                    continue
                got.append((c, decode_partition_state(data, paths.partition_state(c[0], c[1])), stat))
            return got

        t0 = time.monotonic()
        got = self.session.retry(read) if unknown else []
        t_read = time.monotonic() - t0
        for c, state, stat in got:
            topic, partition, leader_epoch, isr, zk_version = c
            if state is None or state.leader != self.broker_id or state.leader_epoch != leader_epoch:
                out[(topic, partition)] = None
            elif stat.version != zk_version:
                out[(topic, partition)] = -1
            else:
                writes.append((c, state.controller_epoch))

        def write():
            pending = []
            for c, controller_epoch in writes:
                isr = tuple(int(b) for b in c[3])
                data = encode_partition_state(LeaderAndIsr(self.broker_id, c[2], isr, controller_epoch))
                pending.append(
                    (c, isr, controller_epoch, zk.set_async(paths.partition_state(c[0], c[1]), data, version=c[4]))
                )
            done = []
            for c, isr, controller_epoch, res in pending:
                try:
                    done.append((c, isr, res.get(), controller_epoch))
                except (BadVersionError, NoNodeError):
                    done.append((c, isr, None, controller_epoch))
            return done

        t0 = time.monotonic()
        answers = self.session.retry(write) if writes else []
        if len(changes) >= 100:
            log.info(
                "ISR writes: read %d states in %.2fs, wrote %d in %.2fs",
                len(unknown),
                t_read,
                len(writes),
                time.monotonic() - t0,
            )
        written = []
        for c, isr, stat, controller_epoch in answers:
            if stat is None:
                out[(c[0], c[1])] = -1
                continue
            written.append((c[0], c[1]))
            out[(c[0], c[1])] = stat.version
            self.cache.record_isr_write(c[0], c[1], stat, (self.broker_id, c[2], list(isr)), controller_epoch)
        if written:
            try:
                self.session.retry(
                    self.session.zk.create,
                    paths.ISR_CHANGE_PREFIX,
                    encode_isr_change_notification(written),
                    sequence=True,
                    makepath=True,
                )
            except (PyklogError, KazooException) as e:  # the ISRs are written; the notification is advisory
                log.warning("could not write the ISR change notification of %d partition(s): %s", len(written), e)
            log.info(
                "ISR changed for %d partition(s) as leader %d: %s",
                len(written),
                self.broker_id,
                ", ".join(f"{t}-{p}" for t, p in written[:10]) + (" ..." if len(written) > 10 else ""),
            )
        return out

    def update_isr(
        self, topic: str, partition: int, leader_epoch: int, isr: Iterable[int], zk_version: int
    ) -> int | None:
        """The leader's ISR change (Kafka's ``Partition.updateIsr`` through ``KafkaZkClient.
        conditionalUpdatePath``): write ``isr`` into the state node if its version is still
        ``zk_version``, keeping leader and leader_epoch, then a ``/isr_change_notification/isr_change_``
        node.  Returns the node's new version, or None if this broker is no longer the leader at
        ``leader_epoch`` (the controller moved leadership: we were deposed; write nothing).

        On a version conflict the node is read again: same leader and epoch (a retried write that
        had succeeded, or a concurrent ISR write of our own) -> write again at the new version;
        otherwise None.  Any thread; blocking."""
        path = paths.partition_state(topic, partition)
        isr = tuple(int(b) for b in isr)
        # the node keeps the controller epoch of the controller that wrote it (Kafka's leader writes
        # the controllerEpoch it learned with its leadership), never a constant
        now = self.partition_state(topic, partition)
        if now is None:
            return None
        controller_epoch = now[0].controller_epoch
        for _attempt in range(10):
            data = encode_partition_state(LeaderAndIsr(self.broker_id, leader_epoch, isr, controller_epoch))
            try:
                stat = self.session.retry(self.session.zk.set, path, data, version=zk_version)
                break
            except NoNodeError:
                return None
            except BadVersionError:
                now = self.partition_state(topic, partition)
                if now is None:
                    return None
                state, version = now
                controller_epoch = state.controller_epoch
                if state.leader != self.broker_id or state.leader_epoch != leader_epoch:
                    log.info(
                        "%s-%d: not updating the ISR to %s: the state node now says leader %d epoch %d "
                        "(ours: leader %d epoch %d)",
                        topic,
                        partition,
                        list(isr),
                        state.leader,
                        state.leader_epoch,
                        self.broker_id,
                        leader_epoch,
                    )
                    return None
                if tuple(state.isr) == isr:
                    stat = None
                    zk_version = version
                    break
                zk_version = version
        else:
            raise ZooKeeperError(f"updating the ISR of {topic}-{partition}: its state node kept changing")
        new_version = stat.version if stat is not None else zk_version
        try:
            self.session.retry(
                self.session.zk.create,
                paths.ISR_CHANGE_PREFIX,
                encode_isr_change_notification([(topic, partition)]),
                sequence=True,
                makepath=True,
            )
        except (PyklogError, KazooException) as e:  # the ISR is written; the notification is advisory
            log.warning("could not write the ISR change notification of %s-%d: %s", topic, partition, e)
        self.cache.record_isr_write(topic, partition, stat, (self.broker_id, leader_epoch, list(isr)), controller_epoch)
        log.info(
            "%s-%d: ISR now %s (leader %d, epoch %d, zk version %d)",
            topic,
            partition,
            list(isr),
            self.broker_id,
            leader_epoch,
            new_version,
        )
        return new_version
