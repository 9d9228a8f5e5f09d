"""Helpers shared by the tests of this directory (and the fault scenarios that build on them)."""

from __future__ import annotations

import time

from kazoo.client import KazooClient

from pyklog.broker.zk import paths
from pyklog.connector.client import ClusterClient
from pyklog.connector.producer import Producer


def make_topic(bootstrap, name, partitions, **configs):
    with ClusterClient(bootstrap) as c:
        c.create_topic(name, partitions, configs=configs or None)


def produce(bootstrap, topic, n, partitions, start=0, codec="none"):
    with Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}) as p:
        for i in range(start, start + n):
            p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions)
        p.flush()


def wait_query(q, predicate, timeout=120.0, what="query progress"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if q.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {q.exception()}")
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last progress {q.lastProgress}")


def stream(spark, **opts):
    r = spark.readStream.format("pyklog")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def group_members(zk_connect, group):
    kc = KazooClient(hosts=zk_connect)
    kc.start(timeout=30)
    try:
        return kc.get_children(paths.consumer_ids(group)) if kc.exists(paths.consumer_ids(group)) else []
    finally:
        kc.stop()
        kc.close()
