"""Topic administration in ZooKeeper: CreateTopics, CreatePartitions, DeleteTopics and the
``/admin/delete_topics`` requests.

Written (paths from :mod:`pyklog.broker.zk.paths`, data by :mod:`pyklog.broker.zk.znodes`):

* ``/brokers/topics/[topic]`` -> ``{"version":1,"partitions":{"0":[replicas]}}``, its
  ``partitions/[p]/state`` nodes and ``/config/topics/[topic]`` -> ``{"version":1,"config":{...}}``.
  A topic's nodes are created (and deleted) in one ZooKeeper multi-op, so no reader sees half a
  topic; a topic too large for one request (``jute.maxbuffer``) is written, grown and deleted in
  parts ordered so that a reader still sees no partition without its state node.  A topic's
  partitions are created with their first replica as leader (epoch 0) and every replica in the
  ISR, as Kafka's controller writes them.
* ``/admin/delete_topics/[topic]``: the topic is marked for deletion (DeleteTopics through
  :meth:`TopicAdmin.mark_topics_for_deletion`, or Kafka's old tools).  The broker's controller
  (:mod:`pyklog.broker.controller.controller`) carries the deletion out: it creates
  ``/admin/replica_deletions/[topic]``, each broker deletes its replicas and answers with
  :meth:`TopicAdmin.replica_deletion_done`, and the controller removes the topic's nodes, its config,
  the marker and the replica deletion nodes in one multi-op (a large topic's partition nodes first,
  in multi-ops of their own: :meth:`TopicAdmin.partition_node_chunks`).  While the marker exists
  the name cannot be created again (Kafka's ``Topic 'x' is marked for deletion.``).  A registry-only cluster
  without a controller (tests) removes the nodes at once (:meth:`TopicAdmin.process_delete_requests`).
* ``/admin/deleted_topics/[topic]`` (pyklog's own): written in the multi-op that deletes a topic,
  removed when the name is created again.  A broker deletes its log of a topic missing from the
  registry only if this record exists (:meth:`TopicAdmin.topic_deletion_recorded`); Kafka's
  controller tells its brokers with StopReplica(deletePartitions=true) instead.

After each write the :class:`~pyklog.broker.zk.metadata_cache.ZkMetadataCache` of this process is
brought up to date at once (other brokers follow through their watches).

Thread-safety: thread-safe (every write is a conditional or atomic ZooKeeper operation; the cache
has its own lock).  Request handler threads and admin tools call it; the deletion-request watch runs
on kazoo's threads.
"""

from __future__ import annotations

import json
import logging

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.recipe.watchers import ChildrenWatch

from pyklog.broker.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PyklogError,
    ReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    ZooKeeperError,
)
from pyklog.broker.zk import paths
from pyklog.broker.zk.metadata_cache import ZkMetadataCache
from pyklog.broker.zk.session import ZkSession, watch_callback
from pyklog.broker.zk.topics import (
    assign_replicas,
    collides,
    placement_racks,
    validate_topic_configs,
    validate_topic_name,
)
from pyklog.broker.zk.znodes import (
    LeaderAndIsr,
    decode_broker_registration,
    decode_topic_assignment,
    decode_topic_id,
    encode_partition_state,
    encode_replica_deletion,
    encode_topic_assignment,
    encode_topic_config,
    new_topic_id,
)

log = logging.getLogger(__name__)

#: the controller epoch written into the state node of a partition created here (Kafka's
#: controller writes its own; pyklog's topic writers are not the controller)
INITIAL_CONTROLLER_EPOCH = 1


#: operations per ZooKeeper multi-op when topics are created or deleted in batches (a multi is one
#: request and must stay under ZooKeeper's jute.maxbuffer, 1 MiB by default)
MAX_OPS_PER_MULTI = 2000


def _chunks(names, ops_of) -> list[list[str]]:
    """Split ``names`` into lists whose ``ops_of(name)`` sum stays under :data:`MAX_OPS_PER_MULTI`
    (a single larger topic gets a list of its own)."""
    out: list[list[str]] = []
    current: list[str] = []
    count = 0
    for n in names:
        k = ops_of(n)
        if current and count + k > MAX_OPS_PER_MULTI:
            out.append(current)
            current, count = [], 0
        current.append(n)
        count += k
    if current:
        out.append(current)
    return out


def _reassigning_partitions(data: bytes) -> list[int]:
    """The partitions of a ``/brokers/topics/<t>`` node with KIP-455 ``adding_replicas`` or
    ``removing_replicas`` (a reassignment in progress), sorted; [] for v1/v2 nodes."""
    try:
        obj = json.loads(data)
    except ValueError:
        return []
    out: set[int] = set()
    for key in ("adding_replicas", "removing_replicas"):
        for p, replicas in (obj.get(key) or {}).items() if isinstance(obj, dict) else ():
            if replicas and str(p).isdigit():
                out.add(int(p))
    return sorted(out)


#: partitions (two nodes each) per multi-op when a topic's partitions are written in parts
_PART_STEP = MAX_OPS_PER_MULTI // 2


def _initial_state(replicas) -> bytes:
    """The state node of a new partition: its first replica leads at epoch 0, every replica in the
    ISR (as Kafka's controller writes it)."""
    return encode_partition_state(LeaderAndIsr(replicas[0], 0, tuple(replicas), INITIAL_CONTROLLER_EPOCH))


def _create_partition_nodes(t, name: str, parts) -> None:
    """Add the creation of each ``(partition, replicas)``'s ``partitions/<p>`` and ``state`` nodes
    to the multi-op ``t``."""
    for p, replicas in parts:
        t.create(paths.partition(name, p), b"")
        t.create(paths.partition_state(name, p), _initial_state(replicas))


class TopicAdmin:
    """Creates, grows and deletes topics in ZooKeeper.  ``broker_id`` None: an admin tool (the
    deletion-request watch is only started by a registering broker)."""

    def __init__(self, session: ZkSession, cache: ZkMetadataCache, broker_id: int | None):
        self.session = session
        self.cache = cache
        self.broker_id = broker_id

    def _live_broker_ids(self) -> list[int]:
        """The registered broker ids read from ZooKeeper now (not the cache), sorted."""
        return sorted(int(c) for c in self.session.retry(self.session.zk.get_children, paths.BROKER_IDS) if c.isdigit())

    def watch_delete_requests(self):
        """Start the ChildrenWatch of ``/admin/delete_topics`` (a registering broker's)."""
        return ChildrenWatch(self.session.zk, paths.ADMIN_DELETE_TOPICS, self._on_delete_requests)

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int = 1,
        configs: dict | None = None,
        validate_only: bool = False,
        *,
        replica_assignment: dict[int, list[int]] | None = None,
        rack_aware: bool = True,
    ) -> dict[int, list[int]]:
        """Create a topic spread over the live brokers; return its assignment ``{partition: [replicas]}``.
        Rack-aware (Kafka's ``RackAwareMode.Enforced``, :func:`~pyklog.broker.zk.topics.assign_replicas`)
        when every live broker registered a ``broker.rack``, unless ``rack_aware`` is false
        (``--disable-rack-aware``); InvalidReplicaAssignmentError when only some did.

        Raises InvalidTopicError (illegal name, or a name colliding with an existing topic by
        ``.``/``_``), TopicAlreadyExistsError, InvalidPartitionsError, InvalidReplicationFactorError
        (more replicas than live brokers), InvalidConfigError, InvalidReplicaAssignmentError (a
        ``replica_assignment`` {partition: [broker ids]} with gaps, duplicates, uneven replica counts
        or brokers that are not live).  Nothing is written if ``validate_only``.  All nodes are
        created in one multi-op; the leader of each partition is its first replica.
        """
        # the marks before the names: a deletion that completes between the two reads removes its
        # mark and its topic node in one multi-op, so the name is then free, never "already exists"
        marked = self.marked_for_deletion()
        existing = self.session.retry(self.session.zk.get_children, paths.BROKER_TOPICS)
        live = self._live_broker_ids()
        assignment, config = self._plan_topic(
            name,
            num_partitions,
            replication_factor,
            configs,
            replica_assignment,
            existing,
            live,
            racks=lambda: placement_racks(self.broker_racks(live), rack_aware),
            marked=marked,
        )
        if validate_only:
            return assignment
        self._write_topic(name, assignment, config)
        # Make the new topic visible to this process at once (the watch follows).
        self.cache.topic(name, refresh_if_missing=True)
        self.cache.set_topic_config(name, config)
        log.info("created topic %s with %d partition(s): %s", name, len(assignment), assignment)
        return assignment

    def create_topics(self, specs: list[dict], validate_only: bool = False) -> dict[str, object]:
        """CreateTopics of many topics at once: ``specs`` are dicts with ``name``, ``num_partitions``,
        ``replication_factor``, ``configs`` and optionally ``replica_assignment`` (as
        :meth:`create_topic`).  Returns ``{name: assignment or the PyklogError refusing it}``.

        Request handler thread.  The ZooKeeper work is batched: the topic names, live brokers,
        stale config nodes and deletion records are read once for the whole batch, every valid
        topic is written in ONE multi-op (Kafka's controller also writes a batch of topics
        together), and the cache learns each new topic once.  A multi that fails (a topic created
        meanwhile elsewhere) is retried topic by topic so each topic gets its own answer."""
        marked = self.marked_for_deletion()  # before the names, as in create_topic
        existing = set(self.session.retry(self.session.zk.get_children, paths.BROKER_TOPICS))
        live = self._live_broker_ids()
        planned: dict[str, tuple] = {}
        out: dict[str, object] = {}
        taken = set(existing)
        rack_map: list = []  # the live brokers' racks, read once when a topic needs placing

        def racks():
            if not rack_map:
                rack_map.append(self.broker_racks(live))
            return placement_racks(rack_map[0])

        for spec in specs:
            name = spec["name"]
            try:
                assignment, config = self._plan_topic(
                    name,
                    spec["num_partitions"],
                    spec["replication_factor"],
                    spec.get("configs"),
                    spec.get("replica_assignment"),
                    taken,
                    live,
                    racks=racks,
                    marked=marked,
                )
            except PyklogError as e:
                out[name] = e
                continue
            planned[name] = (assignment, config)
            taken.add(name)
            out[name] = assignment
        if validate_only or not planned:
            return out
        try:
            stale_configs = set(self.session.retry(self.session.zk.get_children, paths.CONFIG_TOPICS))
        except NoNodeError:
            stale_configs = set()
        try:
            deleted = set(self.session.retry(self.session.zk.get_children, paths.ADMIN_DELETED_TOPICS))
        except NoNodeError:
            deleted = set()

        def write(chunk):
            t = self.session.zk.transaction()
            for name in chunk:
                assignment, config = planned[name]
                self._add_topic_ops(t, name, assignment, config, name in stale_configs, name in deleted)
            return t.commit()

        def ops_of(name):
            return 4 + 2 * len(planned[name][0])

        for name in [n for n in planned if ops_of(n) > MAX_OPS_PER_MULTI]:
            try:  # too large for one multi-op: written in parts
                self._write_large_topic(name, *planned[name], name in stale_configs, name in deleted)
            except PyklogError as e:
                out[name] = e
        for chunk in _chunks([n for n in planned if ops_of(n) <= MAX_OPS_PER_MULTI], ops_of):
            results = self.session.retry(write, chunk)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failures:
                log.info(
                    "creating %d topics in one multi-op failed (%r); creating them one by one", len(chunk), failures[0]
                )
                for name in chunk:
                    try:
                        self._write_topic(name, *planned[name])
                    except PyklogError as e:
                        out[name] = e
        for name, (assignment, config) in planned.items():
            if isinstance(out[name], PyklogError):
                continue
            self.cache.topic(name, refresh_if_missing=True)
            self.cache.set_topic_config(name, config)
            log.info("created topic %s with %d partition(s): %s", name, len(assignment), assignment)
        return out

    def marked_for_deletion(self) -> set[str]:
        """The topics marked for deletion now (``/admin/delete_topics``' children)."""
        try:
            return set(self.session.retry(self.session.zk.get_children, paths.ADMIN_DELETE_TOPICS))
        except NoNodeError:
            return set()

    def _plan_topic(
        self,
        name,
        num_partitions,
        replication_factor,
        configs,
        replica_assignment,
        existing,
        live,
        racks=None,
        marked=frozenset(),
    ) -> tuple[dict[int, list[int]], dict[str, str]]:
        """Validate one topic against ``existing`` topic names, the names ``marked`` for deletion and
        ``live`` broker ids; return its (assignment, config).  Raises as :meth:`create_topic`."""
        validate_topic_name(name)
        if name in marked:  # Kafka's AdminZkClient.validateTopicCreate checks this first
            raise TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
        config = validate_topic_configs(configs)
        if name in existing:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        clash = collides(name, existing)
        if clash:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic(s) {clash} ('.' and '_' are the same in metric names)"
            )
        if replica_assignment is not None:
            assignment = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
            if not assignment or sorted(assignment) != list(range(len(assignment))):
                raise InvalidReplicaAssignmentError(
                    f"replica assignment must cover partitions 0..n-1, got partitions {sorted(assignment)}"
                )
            if any(not r or len(set(r)) != len(r) for r in assignment.values()):
                raise InvalidReplicaAssignmentError(
                    f"replica assignment has empty or duplicate replica lists: {assignment}"
                )
            if len({len(r) for r in assignment.values()}) != 1:
                raise InvalidReplicaAssignmentError(
                    f"all partitions must have the same number of replicas: {assignment}"
                )
            unknown = sorted({b for r in assignment.values() for b in r} - set(live))
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"unknown broker(s) {unknown} in replica assignment (live brokers {live})"
                )
        else:
            assignment = assign_replicas(
                live, num_partitions, replication_factor, racks=racks() if racks is not None else None
            )
        return assignment, config

    def broker_racks(self, ids) -> dict[int, str | None]:
        """``{broker id: broker.rack or None}`` of the registrations of ``ids`` read from ZooKeeper
        now (a broker gone meanwhile is left out).  Any thread but a kazoo handler thread."""

        def read():
            pending = [(b, self.session.zk.get_async(paths.broker_id(int(b)))) for b in ids]
            out = {}
            for b, res in pending:
                try:
                    data, _ = res.get()
                except NoNodeError:
                    continue
                try:
                    out[int(b)] = decode_broker_registration(data, paths.broker_id(int(b))).rack or None
                except (ZooKeeperError, ValueError) as e:
                    log.warning("ignoring unreadable broker registration %s: %s", b, e)
            return out

        return self.session.retry(read)

    def _write_topic(self, name: str, assignment: dict[int, list[int]], config: dict[str, str]) -> None:
        if 4 + 2 * len(assignment) > MAX_OPS_PER_MULTI:
            self._write_large_topic(
                name,
                assignment,
                config,
                bool(self.session.retry(self.session.zk.exists, paths.topic_config(name))),
                bool(self.session.retry(self.session.zk.exists, paths.deleted_topic_record(name))),
            )
            return

        def write():
            t = self.session.zk.transaction()
            self._add_topic_ops(
                t,
                name,
                assignment,
                config,
                bool(self.session.zk.exists(paths.topic_config(name))),
                bool(self.session.zk.exists(paths.deleted_topic_record(name))),
            )
            return t.commit()

        results = self.session.retry(write)
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            if any(isinstance(r, NodeExistsError) for r in failures):
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            raise ZooKeeperError(f"creating topic {name!r} in ZooKeeper failed: {failures[0]!r}")

    def _write_large_topic(
        self,
        name: str,
        assignment: dict[int, list[int]],
        config: dict[str, str],
        stale_config: bool,
        deletion_recorded: bool,
    ) -> None:
        """Create a topic whose nodes do not fit in one multi-op (one request must stay under
        ZooKeeper's ``jute.maxbuffer``: 1 MiB holds about 4,000 partitions' nodes): the config, the
        assignment and the first partitions' nodes in one multi-op (the topic exists, or not, as a
        whole for a racing creator), then the other partitions' ``partitions/<p>`` and ``state``
        nodes in multi-ops of :data:`MAX_OPS_PER_MULTI`, and at the end the assignment node is
        written again unchanged.  A broker that read the topic between two parts took a missing
        state node as written at creation (its first replica leads at epoch 0) and set no watch on
        it; the last write fires every broker's data watch of the topic node, so each re-reads the
        states and watches them all."""
        data = encode_topic_assignment(assignment, new_topic_id())
        parts = sorted(assignment.items())
        first = MAX_OPS_PER_MULTI // 2 - 3

        def write_head():
            t = self.session.zk.transaction()
            config_data = encode_topic_config(config)
            if stale_config:
                t.set_data(paths.topic_config(name), config_data)
            else:
                t.create(paths.topic_config(name), config_data)
            t.create(paths.topic(name), data)
            if deletion_recorded:
                t.delete(paths.deleted_topic_record(name))
            t.create(paths.topic_partitions(name), b"")
            _create_partition_nodes(t, name, parts[:first])
            return t.commit()

        results = self.session.retry(write_head)
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            # written by an earlier attempt whose answer the connection lost: ours if the data matches
            try:
                written, _ = self.session.retry(self.session.zk.get, paths.topic(name))
            except NoNodeError:
                written = None
            if written != data:
                if any(isinstance(r, NodeExistsError) for r in failures):
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists")
                raise ZooKeeperError(f"creating topic {name!r} in ZooKeeper failed: {failures[0]!r}")
        step = _PART_STEP
        for i in range(first, len(parts), step):
            chunk = parts[i : i + step]

            def write_rest(chunk=chunk):
                t = self.session.zk.transaction()
                _create_partition_nodes(t, name, chunk)
                return t.commit()

            results = self.session.retry(write_rest)
            if any(isinstance(r, Exception) and not isinstance(r, RolledBackError) for r in results):
                # a retry after a lost answer: create what is missing one node at a time
                for p, replicas in chunk:
                    state = _initial_state(replicas)
                    for path, value in ((paths.partition(name, p), b""), (paths.partition_state(name, p), state)):
                        try:
                            self.session.retry(self.session.zk.create, path, value)
                        except NodeExistsError:
                            pass
        self.session.retry(self.session.zk.set, paths.topic(name), data)
        log.info("created topic %s in %d multi-ops", name, 2 + (len(parts) - first + step - 1) // step)

    @staticmethod
    def _add_topic_ops(
        t,
        name: str,
        assignment: dict[int, list[int]],
        config: dict[str, str],
        stale_config: bool,
        deletion_recorded: bool,
    ) -> None:
        """Add one topic's nodes to the multi-op ``t``: its config (over a stale config node of a
        deleted topic), assignment, partition states; removes its deletion record (the name is in
        use again)."""
        config_data = encode_topic_config(config)
        if stale_config:
            t.set_data(paths.topic_config(name), config_data)
        else:
            t.create(paths.topic_config(name), config_data)
        t.create(paths.topic(name), encode_topic_assignment(assignment, new_topic_id()))
        if deletion_recorded:
            t.delete(paths.deleted_topic_record(name))
        t.create(paths.topic_partitions(name), b"")
        _create_partition_nodes(t, name, sorted(assignment.items()))

    def create_partitions(
        self, name: str, count: int, assignments: list | None = None, validate_only: bool = False
    ) -> dict[int, list[int]]:
        """Grow a topic to ``count`` partitions; return the new partitions' assignment.

        Kafka's ``AdminZkClient.createPartitions`` (ZkAdminManager): only an increase is allowed
        (InvalidPartitionsError naming the current and requested counts); ``assignments`` (one
        list of broker ids per new partition) must have as many entries as partitions added, the
        topic's replication factor, no duplicates and only live brokers
        (InvalidReplicaAssignmentError); without them the new replicas are placed as at creation,
        continuing the topic's layout (start index = the position of partition 0's leader among
        the sorted live brokers, Kafka's ``fixedStartIndex``).  UnknownTopicOrPartitionError if the
        topic does not exist.  Nothing is written if ``validate_only``.

        One multi-op (checked against the topic node's version, retried after a concurrent change)
        rewrites ``/brokers/topics/<topic>`` and creates each new partition's ``state`` node (its
        first replica leads, epoch 0): pyklog has no controller, so the writer does what Kafka's
        controller does on the partition-modification event.  When the new partitions' nodes do not
        fit in one multi-op (ZooKeeper's ``jute.maxbuffer``), the nodes of all but the last ones are
        written first in multi-ops of their own and the assignment comes last: a reader never sees
        a new partition without its state node.  Every broker's data watch then
        re-reads the topic and its leaders create the new logs.  Thread-safe.
        """
        validate_topic_name(name)
        for _attempt in range(5):
            try:
                data, stat = self.session.retry(self.session.zk.get, paths.topic(name))
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
            existing = decode_topic_assignment(data, paths.topic(name))
            moving = _reassigning_partitions(data)
            if moving:
                # Kafka's ZkAdminManager refuses too: the rewrite would drop adding/removing_replicas
                raise ReassignmentInProgressError(
                    f"a partition reassignment is in progress for topic {name!r} (partitions "
                    f"{', '.join(str(p) for p in moving)}); add partitions once it is complete or cancelled"
                )
            old = len(existing)
            if count < old:
                raise InvalidPartitionsError(
                    f"topic {name!r} currently has {old} partitions, which is higher than the requested {count}"
                )
            if count == old:
                raise InvalidPartitionsError(f"topic {name!r} already has {old} partitions")
            rf = len(existing[0]) if existing.get(0) else 1
            live = self._live_broker_ids()
            added = count - old
            if assignments is not None:
                if len(assignments) != added:
                    raise InvalidReplicaAssignmentError(
                        f"increasing the number of partitions of {name!r} by {added} but "
                        f"{len(assignments)} assignments provided"
                    )
                new = {}
                for i, brokers in enumerate(assignments):
                    brokers = [int(b) for b in brokers]
                    p = old + i
                    if len(set(brokers)) != len(brokers):
                        raise InvalidReplicaAssignmentError(
                            f"duplicate brokers not allowed in the replica assignment of partition {p}: {brokers}"
                        )
                    if len(brokers) != rf:
                        raise InvalidReplicaAssignmentError(
                            f"inconsistent replication factor: partition 0 of {name!r} has {rf} replica(s), "
                            f"the assignment of partition {p} has {len(brokers)}"
                        )
                    unknown = sorted(set(brokers) - set(live))
                    if unknown:
                        raise InvalidReplicaAssignmentError(
                            f"unknown broker(s) {unknown} in the replica assignment of partition {p} "
                            f"(live brokers {live})"
                        )
                    new[p] = brokers
            else:
                if not live:
                    raise InvalidReplicationFactorError(f"no live brokers to place new partitions of {name!r}")
                leader0 = existing[0][0] if existing.get(0) else live[0]
                start = next((i for i, b in enumerate(live) if b >= leader0), 0)
                full = assign_replicas(
                    live,
                    count,
                    rf,
                    start_index=start,
                    replica_shift=start,
                    racks=placement_racks(self.broker_racks(live)),
                )
                new = {p: full[p] for p in range(old, count)}
            if validate_only:
                return new
            assignment = dict(existing)
            assignment.update(new)
            try:  # the topic keeps its id (KIP-516): clients would take a new one for a re-created topic
                topic_id = decode_topic_id(data, paths.topic(name))
            except ZooKeeperError:
                topic_id = None

            parts = sorted(new.items())
            # the new partitions' nodes beyond what fits next to the assignment in the last multi-op
            # are written first (invisible: no reader looks past the assignment), as Kafka's
            # controller writes the state nodes before the assignment that names them
            last = MAX_OPS_PER_MULTI // 2 - 2
            early, tail = parts[: max(0, len(parts) - last)], parts[max(0, len(parts) - last) :]
            try:
                present = {
                    int(c)
                    for c in self.session.retry(self.session.zk.get_children, paths.topic_partitions(name))
                    if c.isdigit()
                }
            except NoNodeError:
                present = set()
            if early:
                self._write_new_partition_nodes(name, early, present)

            def write():
                t = self.session.zk.transaction()
                t.check(paths.topic(name), stat.version)
                t.set_data(paths.topic(name), encode_topic_assignment(assignment, topic_id))
                for p, replicas in tail:
                    if p not in present:
                        t.create(paths.partition(name, p), b"")
                        t.create(paths.partition_state(name, p), _initial_state(replicas))
                    elif self.session.zk.exists(paths.partition_state(name, p)) is None:
                        t.create(paths.partition_state(name, p), _initial_state(replicas))
                    else:  # left by an attempt whose assignment write failed: no reader saw it
                        t.set_data(paths.partition_state(name, p), _initial_state(replicas))
                return t.commit()

            results = self.session.retry(write)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                log.info(
                    "added partitions %d..%d to topic %s%s",
                    old,
                    count - 1,
                    name,
                    f": {new}"
                    if len(new) <= 100
                    else f" in {1 + (len(early) + _PART_STEP - 1) // _PART_STEP} multi-ops",
                )
                self.cache.reload_topic(name)  # this process sees them at once; other brokers by their watch
                return new
            if not any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in failures):
                raise ZooKeeperError(f"adding partitions to topic {name!r} in ZooKeeper failed: {failures[0]!r}")
            # the topic changed under us (another CreatePartitions): read it again
        raise ZooKeeperError(f"adding partitions to topic {name!r}: its assignment kept changing")

    def _write_new_partition_nodes(self, name: str, parts: list, present: set) -> None:
        """Write the ``partitions/<p>`` and ``state`` nodes of partitions not yet in the topic's
        assignment, :data:`_PART_STEP` partitions per multi-op (``present``: the partition nodes
        that exist, left by an earlier attempt whose assignment write failed; their state is written
        again).  No reader looks at them until the assignment names them."""
        for i in range(0, len(parts), _PART_STEP):
            chunk = parts[i : i + _PART_STEP]

            def write(chunk=chunk):
                t = self.session.zk.transaction()
                _create_partition_nodes(t, name, [(p, r) for p, r in chunk if p not in present])
                return t.commit()

            results = self.session.retry(write)
            if any(isinstance(r, Exception) and not isinstance(r, RolledBackError) for r in results) or any(
                p in present for p, _ in chunk
            ):
                # a retry after a lost answer, or nodes of an earlier attempt: one node at a time
                for p, replicas in chunk:
                    for path, value in (
                        (paths.partition(name, p), b""),
                        (paths.partition_state(name, p), _initial_state(replicas)),
                    ):
                        try:
                            self.session.retry(self.session.zk.create, path, value)
                        except NodeExistsError:
                            if path != paths.partition(name, p):
                                self.session.retry(self.session.zk.set, path, value)

    def delete_topic(self, name: str) -> None:
        """Delete the topic's registry nodes and its config (one multi-op; a topic too large for one
        is first hidden from brokers by a replica deletion node and loses its partition nodes in
        multi-ops of their own).  UnknownTopicOrPartitionError if it does not exist.  Brokers delete their local logs from their listeners."""
        validate_topic_name(name)
        for _attempt in range(5):
            try:
                tree = self._subtree(paths.topic(name))
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None

            chunks, tree = self.partition_node_chunks(name, tree, 8)
            hidden: list[str] = []  # the replica deletion node (and its answers) that hid the topic meanwhile
            if chunks:
                left = self._delete_partition_nodes(name, chunks)
                if left is None:
                    continue  # the tree changed under us: look again
                hidden = left

            def delete():
                t = self.session.zk.transaction()
                for p in tree + hidden:
                    t.delete(p)
                if self.session.zk.exists(paths.topic_config(name)):
                    t.delete(paths.topic_config(name))
                if self.session.zk.exists(paths.delete_topic_request(name)):
                    t.delete(paths.delete_topic_request(name))
                # the record that lets every broker delete its logs of this topic (see paths)
                if self.session.zk.exists(paths.ADMIN_DELETED_TOPICS) is None:
                    self.session.zk.ensure_path(paths.ADMIN_DELETED_TOPICS)
                if self.session.zk.exists(paths.deleted_topic_record(name)) is None:
                    t.create(paths.deleted_topic_record(name), b"")
                return t.commit()

            results = self.session.retry(delete)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                self.cache.forget_topics([name])
                log.info("deleted topic %s", name)
                self.cache.notify()
                return
            if not any(isinstance(r, (NotEmptyError, NoNodeError)) for r in failures):
                raise ZooKeeperError(f"deleting topic {name!r} in ZooKeeper failed: {failures[0]!r}")
            # The tree changed under us (a concurrent create/delete): look again.
        raise ZooKeeperError(f"deleting topic {name!r}: its nodes kept changing")

    def _delete_partition_nodes(self, name: str, chunks: list[list[str]]) -> list[str] | None:
        """The first part of deleting a topic too large for one multi-op without a controller: hide
        the topic from brokers as the controller does (``/admin/replica_deletions/<topic>``, created
        if missing), then delete the partition nodes ``chunks``, one multi-op each.  Returns the
        replica deletion subtree, for the final multi-op; None if a multi-op failed (nodes changed
        meanwhile)."""
        try:
            self.session.retry(self.session.zk.ensure_path, paths.ADMIN_REPLICA_DELETIONS)
            self.session.retry(self.session.zk.create, paths.replica_deletion(name), encode_replica_deletion([]))
        except NodeExistsError:
            pass
        for chunk in chunks:

            def delete(chunk=chunk):
                t = self.session.zk.transaction()
                for n in chunk:
                    t.delete(n)
                return t.commit()

            results = self.session.retry(delete)
            if any(isinstance(r, Exception) and not isinstance(r, RolledBackError) for r in results):
                return None
        try:
            return self._subtree(paths.replica_deletion(name))
        except NoNodeError:
            return []

    def delete_topics(self, names: list[str]) -> dict[str, PyklogError | None]:
        """DeleteTopics of many topics at once; ``{name: None (deleted) or the error}``.

        Request handler thread.  Reads each topic's subtree, then deletes every found topic in ONE
        multi-op per :data:`MAX_OPS_PER_MULTI` operations (with its config, deletion request and a
        deletion record, as :meth:`delete_topic`), updates the cache and notifies the listeners
        once.  A multi that fails (a topic changed meanwhile) is retried topic by topic."""
        out: dict[str, PyklogError | None] = {}
        trees: dict[str, list[str]] = {}
        for name in dict.fromkeys(names):
            try:
                validate_topic_name(name)
                trees[name] = self._subtree(paths.topic(name))
            except NoNodeError:
                out[name] = UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            except PyklogError as e:
                out[name] = e
        if not trees:
            return out

        def children(path):
            try:
                return set(self.session.retry(self.session.zk.get_children, path))
            except NoNodeError:
                return set()

        configs, requests = children(paths.CONFIG_TOPICS), children(paths.ADMIN_DELETE_TOPICS)
        if self.session.retry(self.session.zk.exists, paths.ADMIN_DELETED_TOPICS) is None:
            self.session.retry(self.session.zk.ensure_path, paths.ADMIN_DELETED_TOPICS)
        recorded = children(paths.ADMIN_DELETED_TOPICS)

        def delete(chunk):
            t = self.session.zk.transaction()
            for name in chunk:
                for p in trees[name]:
                    t.delete(p)
                if name in configs:
                    t.delete(paths.topic_config(name))
                if name in requests:
                    t.delete(paths.delete_topic_request(name))
                if name not in recorded:
                    t.create(paths.deleted_topic_record(name), b"")
            return t.commit()

        for name in [n for n in trees if len(trees[n]) + 3 > MAX_OPS_PER_MULTI]:
            try:  # too large for one multi-op: deleted in parts
                self.delete_topic(name)
                out[name] = None
            except PyklogError as e:
                out[name] = e
            del trees[name]
        for chunk in _chunks(trees, lambda n: len(trees[n]) + 3):
            results = self.session.retry(delete, chunk)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failures:
                log.info(
                    "deleting %d topics in one multi-op failed (%r); deleting them one by one", len(chunk), failures[0]
                )
                for name in chunk:
                    try:
                        self.delete_topic(name)
                        out[name] = None
                    except PyklogError as e:
                        out[name] = e
                continue
            self.cache.forget_topics(chunk)
            for name in chunk:
                out[name] = None
                log.info("deleted topic %s", name)
        self.cache.notify()
        return out

    def mark_topics_for_deletion(self, names: list[str]) -> dict[str, PyklogError | None]:
        """DeleteTopics in ZooKeeper mode (Kafka's ``AdminZkClient.deleteTopic``): create
        ``/admin/delete_topics/<topic>`` for each existing topic; ``{name: None (marked, or already
        marked) or the error}`` (UnknownTopicOrPartitionError for a topic that does not exist).  The
        controller deletes the topics; the caller waits for them to disappear from the metadata.
        Any thread but a kazoo handler thread; the creations are pipelined."""
        out: dict[str, PyklogError | None] = {}
        zk = self.session.zk
        valid = []
        for name in dict.fromkeys(names):
            try:
                validate_topic_name(name)
                valid.append(name)
            except PyklogError as e:
                out[name] = e

        def mark():
            found = [(n, zk.exists_async(paths.topic(n))) for n in valid]
            existing = [n for n, res in found if res.get() is not None]
            pending = [(n, zk.create_async(paths.delete_topic_request(n), b"")) for n in existing]
            result: dict[str, PyklogError | None] = {
                n: UnknownTopicOrPartitionError(f"topic {n!r} does not exist") for n in valid if n not in existing
            }
            for n, res in pending:
                try:
                    res.get()
                except NodeExistsError:
                    pass  # already marked: the caller waits for the deletion like the first asker (Kafka)
                result[n] = None
            return result

        if valid:
            marked = self.session.retry(mark)
            out.update(marked)
            for n, err in marked.items():
                if err is None:
                    log.info("topic %s marked for deletion", n)
        return out

    def replica_deletion_done(self, topic: str) -> bool:
        """This broker's answer to the controller: its replicas of ``topic`` (being deleted) are
        stopped and their logs deleted (``/admin/replica_deletions/<topic>/<broker id>``).  False if
        the deletion is over already (its node is gone).  Any thread but a kazoo handler thread."""
        try:
            self.session.retry(self.session.zk.create, paths.replica_deletion_done(topic, self.broker_id), b"")
        except NodeExistsError:
            pass
        except NoNodeError:
            return False
        return True

    def topic_znodes(self, name: str) -> list[str]:
        """Every node of the topic's registry subtree (``/brokers/topics/<name>`` and below),
        children before parents; [] if the topic node does not exist."""
        try:
            return self._subtree(paths.topic(name))
        except NoNodeError:
            return []

    def topic_deletion_recorded(self, name: str) -> bool:
        """True if ``name`` was deleted by request (DeleteTopics, ``pyklog-topics --delete``,
        ``/admin/delete_topics``) and not created again since: only then may a broker delete its
        local logs of a topic missing from the registry.  A topic whose znodes vanished otherwise
        (ZooKeeper restarted empty, nodes removed by hand) has no record."""
        validate_topic_name(name)
        return self.session.retry(self.session.zk.exists, paths.deleted_topic_record(name)) is not None

    def read_assignment(self, name: str) -> dict[int, list[int]] | None:
        """The topic's replica assignment (partition -> replicas) read from ZooKeeper now
        (``/brokers/topics/<name>``, not the cache), None if the topic node does not exist.  A
        blocking read through the session's retry: any thread but a kazoo handler thread; a
        malformed node raises its decode error."""
        path = paths.topic(name)
        try:
            data, _ = self.session.retry(self.session.zk.get, path)
        except NoNodeError:
            return None
        return decode_topic_assignment(data, path)

    def _subtree(self, root: str) -> list[str]:
        """Every node under ``root`` and ``root`` itself, children before parents (deeper levels
        first).  The children of a level are read pipelined, a batch at a time; a node that vanishes
        meanwhile is left out; NoNodeError if ``root`` does not exist."""

        def read():
            zk = self.session.zk
            levels = [[root]]
            while levels[-1]:
                below: list[str] = []
                level = levels[-1]
                for i in range(0, len(level), self.SUBTREE_READ_BATCH):
                    pending = [(n, zk.get_children_async(n)) for n in level[i : i + self.SUBTREE_READ_BATCH]]
                    for n, res in pending:
                        try:
                            below.extend(f"{n}/{c}" for c in res.get())
                        except NoNodeError:
                            if n == root:
                                raise
                levels.append(below)
            return [n for level in reversed(levels) for n in level]

        return self.session.retry(read)

    #: children lists read per round trip batch by :meth:`_subtree`
    SUBTREE_READ_BATCH = 1000

    def partition_node_chunks(self, name: str, tree: list[str], extra_ops: int) -> tuple[list[list[str]], list[str]]:
        """Split the topic subtree ``tree`` (as :meth:`topic_znodes` returns it) for a deletion that
        does not fit in one multi-op with ``extra_ops`` other operations: ``(chunks, rest)``, where
        ``chunks`` are the nodes below ``partitions/`` in lists of at most
        :data:`MAX_OPS_PER_MULTI` - 1 operations (children before parents, to delete first and in
        order) and ``rest`` the topic and ``partitions`` nodes, for the final multi-op.  ``([], tree)``
        when everything fits in one."""
        if len(tree) + extra_ops <= MAX_OPS_PER_MULTI:
            return [], list(tree)
        below = paths.topic_partitions(name) + "/"
        nodes = [n for n in tree if n.startswith(below)]
        rest = [n for n in tree if not n.startswith(below)]
        step = MAX_OPS_PER_MULTI - 1  # room for the controller's fence
        return [nodes[i : i + step] for i in range(0, len(nodes), step)], rest

    @watch_callback
    def _on_delete_requests(self, children) -> bool | None:
        if children and self.cache.controller_id == self.broker_id:
            self.session.admin_events.submit("controller-duty", self.process_delete_requests)
        return None

    def process_delete_requests(self) -> None:
        """Carry out ``/admin/delete_topics/<topic>`` requests (only on the controller)."""
        try:
            requests = self.session.retry(self.session.zk.get_children, paths.ADMIN_DELETE_TOPICS)
        except (PyklogError, KazooException) as e:
            log.warning("could not read deletion requests: %s", e)
            return
        for name in requests:
            try:
                self.delete_topic(name)
            except (UnknownTopicOrPartitionError, InvalidTopicError):
                try:
                    self.session.retry(self.session.zk.delete, paths.delete_topic_request(name))
                except NoNodeError:
                    pass
            except (PyklogError, KazooException) as e:
                log.warning("deletion request for topic %s failed: %s", name, e)
