"""How a topic's subtree is split for a deletion that does not fit in one ZooKeeper multi-op."""

from __future__ import annotations

from pyklog.broker.zk import paths, topic_admin
from pyklog.broker.zk.topic_admin import MAX_OPS_PER_MULTI, TopicAdmin


def _tree(name: str, n: int) -> list[str]:
    """A topic subtree as :meth:`TopicAdmin.topic_znodes` returns it: deeper levels first."""
    states = [paths.partition_state(name, p) for p in range(n)]
    parts = [paths.partition(name, p) for p in range(n)]
    return states + parts + [paths.topic_partitions(name), paths.topic(name)]


def test_a_small_topic_is_deleted_in_one_multi_op():
    admin = TopicAdmin(None, None, None)
    tree = _tree("t", 10)
    assert admin.partition_node_chunks("t", tree, 5) == ([], tree)


def test_a_large_topic_loses_its_partition_nodes_first_children_before_parents():
    admin = TopicAdmin(None, None, None)
    tree = _tree("t", 2 * MAX_OPS_PER_MULTI)
    chunks, rest = admin.partition_node_chunks("t", tree, 5)
    assert rest == [paths.topic_partitions("t"), paths.topic("t")]
    assert all(len(c) <= MAX_OPS_PER_MULTI - 1 for c in chunks)  # with the controller's fence
    flat = [n for c in chunks for n in c]
    assert flat == tree[:-2]  # every partition node once, in order: a state before its partition
    assert flat.index(paths.partition_state("t", 5)) < flat.index(paths.partition("t", 5))


def test_the_limit_counts_the_final_operations(monkeypatch):
    monkeypatch.setattr(topic_admin, "MAX_OPS_PER_MULTI", 20)
    admin = TopicAdmin(None, None, None)
    tree = _tree("t", 8)  # 18 nodes
    assert admin.partition_node_chunks("t", tree, 2)[0] == []
    chunks, rest = admin.partition_node_chunks("t", tree, 3)
    assert [len(c) for c in chunks] == [16] and rest == tree[-2:]
