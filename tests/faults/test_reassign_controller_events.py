"""KIP-455 partition reassignment of many partitions at once (AlterPartitionReassignments 45) keeps
the controller's event thread busy for seconds; with one request handler thread the controller broker
must still answer Metadata meanwhile.  Real broker processes in one ZooKeeper chroot.

Reassignment under produce, listing, controller failover, cancel and the tool are in
tests/integration/controller/test_reassign.py.
"""

from __future__ import annotations

import json
import threading
import time

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.integration.controller.support import assignment, controller_of, create_topic
from tests.integration.replication_support import REPL_PROPS
from tests.support import wait_for


def admin(bootstrap):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def test_a_long_controller_event_holds_no_io_thread(broker_factory, zk, zk_chroot):
    """AlterPartitionReassignments of 300 partitions keeps the controller's event thread busy for
    seconds; with ONE request handler thread (num.io.threads=1) the controller broker still answers
    Metadata meanwhile: the handler hands the event over and the answer goes out when it is done."""
    ids = (0, 1, 2)
    brokers = {
        i: broker_factory(i, **REPL_PROPS, **{"num.io.threads": "1", "controlled.shutdown.retry.backoff.ms": "300"})
        for i in ids
    }
    wait_for(lambda: sorted(int(c) for c in zk.get_children(paths.BROKER_IDS)) == list(ids), message="registered")
    wait_for(lambda: controller_of(zk)[0] in ids, message="a controller elected")
    ctl = controller_of(zk)[0]
    a, b = [i for i in ids if i != ctl]
    n = 300
    topic = create_topic(zk_chroot, {p: [a, b] for p in range(n)})
    wait_for(
        lambda: all(
            json.loads(zk.get(paths.partition_state(topic, p))[0])["isr"] == [a, b]
            or sorted(json.loads(zk.get(paths.partition_state(topic, p))[0])["isr"]) == sorted([a, b])
            for p in (0, n - 1)
        ),
        timeout=60,
        message="ISRs",
    )
    result = {}

    def alter():
        with support.Wire(brokers[ctl].port, timeout=120) as w:
            t0 = time.monotonic()
            r = w.request(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                0,
                {
                    "timeout_ms": 120000,
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": p, "replicas": [b, a]} for p in range(n)]}
                    ],
                },
            )
            result.update(resp=r, took=time.monotonic() - t0)

    th = threading.Thread(target=alter)
    latencies = []
    with support.Wire(brokers[ctl].port) as w:
        th.start()
        while th.is_alive():
            t0 = time.monotonic()
            w.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})
            latencies.append(time.monotonic() - t0)
            time.sleep(0.05)
    th.join()
    r = result["resp"]
    assert r["error_code"] == 0 and all(p["error_code"] == 0 for t in r["responses"] for p in t["partitions"]), r
    took = result["took"]
    print(f"alter took {took:.2f} s, Metadata max {max(latencies):.3f} s over {len(latencies)}")
    assert took >= 0.5, f"the controller event took {took:.2f} s: too short to tell"
    assert len(latencies) >= 5 and max(latencies) < took / 2, (took, max(latencies), len(latencies))
    wait_for(lambda: assignment(zk, topic, n - 1) == [b, a], timeout=60, message="moved")
