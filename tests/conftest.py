"""The test tiers and the shared fixtures.

The directory decides a test's tier (and its marker, so ``-m`` can be trusted):

* ``tests/unit/<area>/``: needs no server, JRE, root or network (``make unit``, under a minute);
  a unit test asking for a server fixture below is a collection error.
* ``tests/integration/<area>/``: real ZooKeeper, broker processes, stock clients, Spark (``make test``).
* ``tests/faults/``: the slow fault scenarios, minutes of SIGKILLs under load (``make test-faults``).

Shared fixtures, ONE ZooKeeper and ONE SparkSession per test session (CI time budget):

* ``zookeeper``: a real ZooKeeper from pyspark's jars (or an external one: PYKLOG_TEST_ZK=host:port).
* ``zk_chroot``: a fresh uuid chroot connect string per test (``127.0.0.1:port/pyklog-<uuid>``),
  so brokers and consumers of different tests never see each other;  ``zk``: a started
  KazooClient on it.
* ``broker``: one broker process in its own chroot, per test;  ``broker_factory`` for clusters.
* ``spark``: the shared SparkSession (local[2]) with pyklog registered.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from tests.support import BrokerProcess, kazoo_client, new_chroot

TESTS = Path(__file__).resolve().parent
#: the fixtures that start a server (or the JVM): not for tests/unit/
SERVER_FIXTURES = frozenset({"zookeeper", "zk_chroot", "zk", "broker_factory", "broker", "spark"})
TIERS = {"unit": "unit", "integration": "integration", "faults": "faults"}


def pytest_collection_modifyitems(config, items):
    """Mark each test with the tier of its directory (and ``spark`` when it uses the SparkSession);
    a test in tests/unit/ that asks for a server fixture stops the run."""
    wrong = []
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(TESTS).parts
        tier = TIERS.get(rel[0]) if len(rel) > 1 else None
        if tier is None:
            raise pytest.UsageError(
                f"{item.nodeid}: a test belongs under tests/unit, tests/integration or tests/faults"
            )
        item.add_marker(getattr(pytest.mark, tier))
        if "spark" in item.fixturenames:
            item.add_marker(pytest.mark.spark)
        if tier == "unit":
            used = SERVER_FIXTURES.intersection(item.fixturenames)
            if used:
                wrong.append(f"{item.nodeid} uses {', '.join(sorted(used))}")
    if wrong:
        raise pytest.UsageError(
            "unit tests may not start servers; move these to tests/integration/:\n  " + "\n  ".join(wrong)
        )


# No PYSPARK_PYTHON here: `import pyklog` (through support) sets it, as it does for users.


@pytest.fixture
def no_group_coordinator_errors(caplog):
    """The test fails if a group coordinator running in the pytest process logged an error (e.g. a
    failing respond callback).  Used by the group coordinator tests through ``pytest.mark.usefixtures``."""
    yield
    errors = [
        r for r in caplog.records if r.name.startswith("pyklog.broker.coordinator.group.") and r.levelname == "ERROR"
    ]
    assert not errors, [r.getMessage() for r in errors]


def pytest_sessionfinish(session, exitstatus):
    """After all the suite's imports, nothing named ``broker`` or ``connector`` may have been
    imported: pyklog's only import name is ``pyklog``."""
    bare = sorted(m for m in sys.modules if m.split(".")[0] in ("broker", "connector"))
    if bare:
        print(f"\nERROR: modules imported under a bare name (not pyklog.*): {bare}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def zookeeper():
    ext = os.environ.get("PYKLOG_TEST_ZK")
    if ext:
        yield ext
        return
    from pyklog.broker.zk.server import ZooKeeperServer

    zk = ZooKeeperServer(max_session_timeout_ms=60000)
    zk.start()
    try:
        yield zk.connect_string
    finally:
        zk.stop()


@pytest.fixture
def zk_chroot(zookeeper):
    """A connect string with a fresh chroot; the chroot node is created so clients can use it."""
    return new_chroot(zookeeper)


@pytest.fixture
def zk(zk_chroot):
    """A started KazooClient on ``zk_chroot`` (stopped and closed after the test)."""
    kc = kazoo_client(zk_chroot)
    yield kc
    kc.stop()
    kc.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so fixtures can tell whether their test failed."""
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


@pytest.fixture
def broker_factory(zk_chroot, tmp_path, request):
    """Start broker processes; when the test fails, their output is printed (shown by pytest)."""
    started: list[BrokerProcess] = []

    def make(broker_id: int = 0, start: bool = True, zk_connect: str | None = None, **props) -> BrokerProcess:
        # the last broker of a cluster to stop finds no other broker to lead its partitions and
        # retries its controlled shutdown (Kafka's 3 attempts, 5 s apart): 1 s apart in tests
        if not {"controlled.shutdown.retry.backoff.ms", "controlled_shutdown_retry_backoff_ms"} & set(props):
            props["controlled_shutdown_retry_backoff_ms"] = "1000"
        b = BrokerProcess(
            zk_connect or zk_chroot,
            broker_id=broker_id,
            log_dir=str(tmp_path / f"broker{broker_id}-{len(started)}"),
            **props,
        )
        started.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in started:
        b.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for b in started:
            print(f"\n----- broker {b.broker_id} output ({b.stdout_path}) -----\n{b.output()[-6000:]}")


@pytest.fixture
def broker(broker_factory):
    return broker_factory(0)


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"pyklog-spark-{uuid.uuid4().hex[:8]}")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pyklog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", os.path.join(tmp, "warehouse"))
        .config("spark.local.dir", os.path.join(tmp, "local"))
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    import pyklog

    pyklog.register(session)
    yield session
    session.stop()
    shutil.rmtree(tmp, ignore_errors=True)
