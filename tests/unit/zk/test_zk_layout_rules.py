"""The ZooKeeper side's shape, checked statically (no server): every ZooKeeper path is built in
pyklog.broker.zk.paths, the ZooKeeper launcher imports no command-line code, the connector's
pyklog-configs does not reach for the broker's ZkCluster, and ZkCluster is a facade over its parts."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
ZK_ROOTS = (
    "/brokers",
    "/config",
    "/admin",
    "/consumers",
    "/controller",
    "/isr_change",
    "/latest_producer_id_block",
    "/cluster",
    "/pyklog_spark_sinks",
    "/log_dir_event",
    "/kafka-acl",
)


def _sources(*dirs: str):
    for d in dirs:
        yield from sorted((ROOT / d).rglob("*.py"))


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_every_zookeeper_path_literal_is_in_paths_py():
    found = []
    for path in _sources("broker", "connector"):
        if path.name == "paths.py" and path.parent.name == "zk":
            continue
        tree = ast.parse(path.read_text())
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value.startswith(ZK_ROOTS)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "ZooKeeper paths built outside broker/zk/paths.py:\n" + "\n".join(found)


def test_zookeeper_launcher_imports_no_cli_code():
    imports = _imports(ROOT / "broker" / "zk" / "server.py")
    assert not [m for m in imports if m.startswith(("pyklog.broker.cli", "pyklog.connector"))], imports


@pytest.mark.parametrize("module", ["configs.py"])
def test_connector_configs_tool_does_not_use_the_brokers_zk_cluster(module):
    imports = _imports(ROOT / "connector" / "cli" / module)
    assert not [m for m in imports if m.startswith("pyklog.broker.zk.cluster")], imports


def test_zk_cluster_is_a_facade_over_its_parts():
    from pyklog.broker.zk.cluster import ZkCluster
    from pyklog.broker.zk.configs import ZkConfigs
    from pyklog.broker.zk.consumer_groups import ZkConsumerGroups
    from pyklog.broker.zk.isr import IsrWriter
    from pyklog.broker.zk.metadata_cache import ZkMetadataCache
    from pyklog.broker.zk.producer_ids import ZkProducerIdManager
    from pyklog.broker.zk.registration import BrokerRegistrar
    from pyklog.broker.zk.session import ZkSession
    from pyklog.broker.zk.topic_admin import TopicAdmin

    broker = ZkCluster("127.0.0.1:1/chroot", 3, "h", 9092)
    admin = ZkCluster("127.0.0.1:1", None)
    for c in (broker, admin):
        assert isinstance(c.session, ZkSession) and c.zk is None and c.cluster_id is None
        assert isinstance(c.metadata_cache, ZkMetadataCache) and isinstance(c.topic_admin, TopicAdmin)
        assert isinstance(c.configs, ZkConfigs) and isinstance(c.producer_ids, ZkProducerIdManager)
        assert isinstance(c.isr, IsrWriter) and isinstance(c.consumer_groups, ZkConsumerGroups)
        for part in (c.metadata_cache, c.topic_admin, c.configs, c.producer_ids, c.isr, c.consumer_groups):
            assert part.session is c.session
        assert not c.registered
    assert isinstance(broker.registrar, BrokerRegistrar) and admin.registrar is None
    assert broker.listeners == ["PLAINTEXT://h:9092"] and broker.session.chroot == "/chroot"
    assert broker.session.registering and not admin.session.registering
