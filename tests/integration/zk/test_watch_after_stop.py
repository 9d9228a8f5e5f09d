"""A ZooKeeper watch that fires while or after :meth:`ZkCluster.stop` closes the client returns
quietly (False: kazoo then drops the watch) instead of dying on the client set to None.

Fault: many quick start / create topic / stop cycles of an admin ZkCluster (what each
``pyklog-topics --create`` does) while a second client keeps creating topics, so the topic and
broker watches fire during stop.  Kazoo logs a watch function's exception with a traceback
(``kazoo.recipe.watchers``); before this change some cycles logged ``AttributeError: 'NoneType'
object has no attribute 'get_async'``.  Counted: tracebacks in the captured log = 0, and every
topic created is in the registry.
"""

from __future__ import annotations

import logging
import threading
import uuid

from pyklog.broker.zk.cluster import ZkCluster


def test_watches_after_stop_return_quietly(zk_chroot, caplog):
    caplog.set_level(logging.INFO)
    stop = threading.Event()
    background: list[str] = []

    def churn():  # topic registry changes all the time: the admin clusters' watches keep firing
        c = ZkCluster(zk_chroot, None)
        c.start()
        try:
            # a steady churn, bounded: since topic creation stopped re-reading the whole registry it
            # is fast enough to create thousands of topics during the 50 cycles, and every cycle's
            # start() reads them all
            while not stop.is_set() and len(background) < 300:
                name = f"bg-{uuid.uuid4().hex[:8]}"
                c.create_topic(name, 1, 1, {}, False, replica_assignment={0: [0]})
                background.append(name)
                stop.wait(0.02)
        finally:
            c.stop()

    seed = ZkCluster(zk_chroot, 0, "127.0.0.1", 9)  # one live broker for the assignments
    seed.start()
    t = threading.Thread(target=churn, daemon=True)
    t.start()
    created = []
    try:
        for i in range(50):
            c = ZkCluster(zk_chroot, None)
            c.start()
            name = f"cycle-{i}-{uuid.uuid4().hex[:6]}"
            c.create_topic(name, 1, 1, {}, False)
            created.append(name)
            c.stop()
    finally:
        stop.set()
        t.join(30)
    try:
        topics = seed.topics()
        from tests.support import wait_for

        wait_for(
            lambda: set(created + background) <= set(seed.topics()),
            timeout=20,
            message="every created topic in the registry",
        )
    finally:
        seed.stop()
    bad = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not bad, "\n".join(
        f"{r.name}: {r.getMessage()} {r.exc_info[1]!r}" if r.exc_info else r.getMessage() for r in bad[:5]
    )
    assert not [r for r in caplog.records if "NoneType" in r.getMessage()]
    assert len(created) == 50 and topics is not None
