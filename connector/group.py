"""A member of a ZooKeeper consumer group: registration, watches, rebalance, partition owners.

This is the seed's "Consumer registration algorithm" and "Consumer rebalancing algorithm"
(Kafka's ZookeeperConsumerConnector), with Kafka's registry layout (paths in broker.zk.paths)::

    /consumers/[group]/ids/[consumer_id]            ephemeral  {"version":1,"subscription":{...},
                                                               "pattern":"static"|"white_list"|"black_list",
                                                               "timestamp":"<ms>"}
    /consumers/[group]/owners/[topic]/[partition]   ephemeral  consumer_id

Registration: the member creates its ``ids`` node and watches the group's ``ids`` children,
``/brokers/ids`` children, ``/brokers/topics`` children (new topics, for filters and for static
topics created later) and the data of every topic it may consume (partition count changes).  Every
change triggers a rebalance.

Rebalance: read every member's subscription from ``ids`` and partition counts from
``/brokers/topics/[topic]`` (and, for ``sticky``, the current owners from the owner registry), compute
the assignment with :func:`connector.assignors.assign` (every member computes the same answer from the
same sorted inputs, so no leader is needed; ``sticky`` members also watch the owner registry
and recompute 0.2 s after it changes, so they converge on one snapshot), release owned partitions that move (``on_revoke`` is
called first so the caller can commit), then claim new ones by creating their ephemeral owner nodes.
A partition still held by its previous owner is retried: at once when its owner node is deleted
(an ``exists`` watch), otherwise every ``rebalance_backoff_ms``; after ``rebalance_max_retries`` failed
attempts the rebalance fails with :class:`~broker.errors.RebalanceFailedError` (raised by
:meth:`GroupMember.wait_stable`, logged, and passed to ``on_error``); the next registry change starts
a fresh attempt.

A lost ZooKeeper session drops all ownership at once (``on_lost`` is called, nothing is committed:
another member may already own the partitions); when the client reconnects with a new session the
member registers again (waiting for a stale node of its old session to expire) and rebalances.
While disconnected (kazoo SUSPENDED) the member cannot know whether its session still lives, so
once it has been disconnected for the session timeout it drops its ownership the same way; if it
reconnects within its still-valid session it claims its own owner nodes back (NodeExists from our own
session is success).

Fenced commits (:meth:`GroupMember.commit_offsets`): every session of a member creates an ephemeral
sequential node ``/consumers/[group]/pyklog_fences/[consumer_id]-[seq]`` (pyklog's own record; a
sequence number is never reused, so the node stands for one session).  A commit is one multi-op that
checks that node, checks the partitions' owner nodes at the versions read (ours, created by this
session) and sets the offset nodes at the versions read, skipping offsets already at or beyond: a
member whose session expired while it was paused (a zombie) commits nothing, even once kazoo has
opened a new session for it, and no offset moves backwards.  :meth:`GroupMember.session_valid` asks
the server whether the session that owns the partitions still lives.

``manual_release=True`` (the Spark driver): partitions the new assignment takes away are not released
by the rebalance; they show in :meth:`to_release` and stay owned until the caller calls
:meth:`release` after committing them.  Partitions newly assigned but still held by others are claimed
in the background with backoff, without a retry limit (their owners release at batch boundaries).

States (:class:`MemberState`, each with its valid previous states in :data:`VALID_PREVIOUS`), in the spirit of kazoo's
``SetPartitioner`` (ALLOCATING / ACQUIRED / RELEASE / FAILURE) and kazoo's connection states::

    NEW -> REGISTERING -> REBALANCING -> STABLE -> REBALANCING (a watch fired) -> ...
                          REBALANCING -> FAILED (rebalance.max.retries) -> REBALANCING | STABLE
    any running state -> SUSPENDED (disconnected: ownership kept) -> REBALANCING (same session)
    any running state | SUSPENDED -> LOST (ownership dropped) -> REGISTERING (connected again)
    any started state -> STOPPING -> STOPPED (final)

One method changes the state (``GroupMember._transition``, under the member's lock); a move outside
the table raises :class:`IllegalTransitionError`, which is a bug in the member, not a user error.
:attr:`GroupMember.state`, :meth:`~GroupMember.is_stable`, :meth:`~GroupMember.wait_stable` and
:attr:`~GroupMember.error` read the state; :meth:`~GroupMember.add_state_listener` observes every move.

Thread-safety: all public methods are thread-safe.  Callbacks (``on_assign``, ``on_revoke``,
``on_lost``, ``on_error``) run on the member's rebalance thread (never on a kazoo thread) and must not
call :meth:`stop`.  Several members may live in one process; each has its own ZooKeeper session.
"""

from __future__ import annotations

import enum
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.exceptions import ZookeeperError as KazooZookeeperError
from kazoo.protocol.states import EventType
from kazoo.retry import RetryFailedError

from pyklog.broker.common import state_machine
from pyklog.broker.common.retry import Backoff, Deadline
from pyklog.broker.errors import ConfigError, PyklogError, RebalanceFailedError, ZooKeeperError
from pyklog.broker.zk import paths, znodes
from pyklog.broker.zk.znodes import decode_consumer_offset, encode_consumer_offset
from pyklog.connector.assignors import STRATEGIES, assign

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
REGISTRATION_VERSION = 1
OWNER_SETTLE_S = 0.2  # sticky: rebalance again this long after the owner registry changed


class TopicFilter:
    """A regex topic filter (Kafka's TopicFilter): commas mean ``|``, blanks and quotes around are
    dropped, and a topic is allowed when the whole name matches (Java's ``String.matches``)."""

    pattern = ""

    def __init__(self, regex: str):
        if not isinstance(regex, str) or not regex.strip():
            raise ConfigError(f"a topic filter needs a non-empty regular expression; got {regex!r}")
        cleaned = regex.strip().replace(",", "|").replace(" ", "").strip("\"'")
        try:
            self._re = re.compile(cleaned)
        except re.error as e:
            raise ConfigError(f"invalid topic filter regular expression {regex!r}: {e}") from None
        self.regex = cleaned

    def is_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        if exclude_internal_topics and topic in INTERNAL_TOPICS:
            return False
        return self._matches(topic)

    def _matches(self, topic: str) -> bool:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.regex!r})"

    def __eq__(self, other):
        return type(other) is type(self) and other.regex == self.regex

    def __hash__(self):
        return hash((type(self).__name__, self.regex))


class Whitelist(TopicFilter):
    """Topics whose whole name matches the regex."""

    pattern = "white_list"

    def _matches(self, topic):
        return self._re.fullmatch(topic) is not None


class Blacklist(TopicFilter):
    """Topics whose name does not match the regex."""

    pattern = "black_list"

    def _matches(self, topic):
        return self._re.fullmatch(topic) is None


def filter_for(pattern: str, regex: str) -> TopicFilter:
    if pattern == "white_list":
        return Whitelist(regex)
    if pattern == "black_list":
        return Blacklist(regex)
    raise ConfigError(f"topic filter pattern must be white_list or black_list; got {pattern!r}")


def registration_json(subscription: Mapping[str, int], pattern: str) -> bytes:
    """The value of ``/consumers/[group]/ids/[consumer_id]`` (Kafka's layout, :mod:`pyklog.broker.zk.znodes`)."""
    return znodes.encode_consumer_registration(
        znodes.ConsumerRegistration(dict(subscription), pattern, str(int(time.time() * 1000)), REGISTRATION_VERSION)
    )


def parse_registration(data: bytes, path: str = paths.consumer_id("?", "?")) -> tuple[str, dict[str, int]]:
    """(pattern, subscription) from a registration node; ZkDataError (a ValueError) says what was read."""
    reg = znodes.decode_consumer_registration(data, path)
    return reg.pattern, reg.subscription


def topics_of(
    pattern: str, subscription: Mapping[str, int], all_topics: Iterable[str], exclude_internal_topics: bool = True
) -> set[str]:
    """The topics a registration subscribes to, given the topics that exist."""
    if pattern == "static":
        return set(subscription)
    topics: set[str] = set()
    listed = list(all_topics)
    for regex in subscription:
        f = filter_for(pattern, regex)
        topics.update(t for t in listed if f.is_allowed(t, exclude_internal_topics))
    return topics


def partition_count(data: bytes, topic: str) -> int:
    """Number of partitions from ``/brokers/topics/[topic]``; ZkDataError (a ValueError) unless 0..n-1."""
    path = paths.topic(topic)
    return znodes.partition_count(znodes.decode_topic_assignment(data, path), path, data)


def default_consumer_id() -> str:
    """``hostname:uuid`` (the seed's consumer id form)."""
    return f"{socket.gethostname()}:{uuid.uuid4()}"


_ZK_ERRORS = (KazooException, RetryFailedError, InterruptedError)


class MemberState(enum.Enum):
    """Where a :class:`GroupMember` is in its life; :data:`VALID_PREVIOUS` says where each state may be
    entered from.

    The member's own vocabulary for what kazoo's ``SetPartitioner`` calls ALLOCATING / ACQUIRED /
    RELEASE / FAILURE, with kazoo's connection states (SUSPENDED: ownership kept; LOST: given up)."""

    NEW = "new"  # constructed; start() not called yet (or start() failed)
    REGISTERING = "registering"  # connecting, creating /consumers/[group]/ids/[consumer_id]
    REBALANCING = "rebalancing"  # a rebalance is due or running: release, assign, claim owner nodes
    STABLE = "stable"  # owns exactly the target of the last rebalance; nothing is pending
    FAILED = "failed"  # rebalance.max.retries claims failed (RebalanceFailedError)
    SUSPENDED = "suspended"  # disconnected from ZooKeeper; ownership kept (the session may live)
    LOST = "lost"  # session expired, or disconnected for the session timeout: ownership dropped
    STOPPING = "stopping"  # stop() called: on_revoke, then the session is closed
    STOPPED = "stopped"  # the session is closed; a member is never started twice

    def __repr__(self):
        return f"{type(self).__name__}.{self.name}"


_S = MemberState
#: state -> the states it may be entered from (the one table; read forwards with
#: :func:`next_states`).  A move not allowed here is a bug (:class:`IllegalTransitionError`).
VALID_PREVIOUS: Mapping[MemberState, frozenset] = MappingProxyType(
    {
        # start() failed: NEW again (start may be called again)
        _S.NEW: frozenset({_S.REGISTERING}),
        # start(); the member's own registration vanished; connected again after LOST
        _S.REGISTERING: frozenset({_S.NEW, _S.REBALANCING, _S.LOST}),
        # registered; a watch fired or a release (STABLE); a registry change (FAILED); reconnected
        # within the session (SUSPENDED)
        _S.REBALANCING: frozenset({_S.REGISTERING, _S.STABLE, _S.FAILED, _S.SUSPENDED}),
        # all claimed; a blocked owner let go and the claim succeeded (FAILED)
        _S.STABLE: frozenset({_S.REBALANCING, _S.FAILED}),
        # rebalance.max.retries claims failed
        _S.FAILED: frozenset({_S.REBALANCING}),
        # disconnected from any running state: ownership kept
        _S.SUSPENDED: frozenset({_S.REGISTERING, _S.REBALANCING, _S.STABLE, _S.FAILED}),
        # session expired, or disconnected too long: ownership dropped
        _S.LOST: frozenset({_S.REGISTERING, _S.REBALANCING, _S.STABLE, _S.FAILED, _S.SUSPENDED}),
        # stop() from any started state
        _S.STOPPING: frozenset({_S.REGISTERING, _S.REBALANCING, _S.STABLE, _S.FAILED, _S.SUSPENDED, _S.LOST}),
        _S.STOPPED: frozenset({_S.STOPPING}),  # final
    }
)


def next_states(state: MemberState) -> frozenset:
    """The states ``state`` may move to (:data:`VALID_PREVIOUS` read forwards; pure)."""
    return state_machine.next_states(VALID_PREVIOUS, state)


class IllegalTransitionError(state_machine.IllegalTransitionError, PyklogError):
    """A :class:`GroupMember` tried a state change :data:`VALID_PREVIOUS` does not allow.  This is a bug
    in the member, never a user error; the state is left unchanged.  It is the broker's one
    :class:`pyklog.broker.common.state_machine.IllegalTransitionError`, and a PyklogError as before."""

    def __init__(self, old: MemberState, new: MemberState):
        allowed = ", ".join(s.name for s in sorted(next_states(old), key=lambda s: s.name)) or "none"
        super().__init__(
            f"illegal group member state transition {old.name} -> {new.name} (allowed from {old.name}: {allowed})"
        )
        self.old, self.new = old, new


def check_transition(old: MemberState, new: MemberState) -> None:
    """Raise :class:`IllegalTransitionError` unless ``old`` is one of ``VALID_PREVIOUS[new]`` (pure)."""
    state_machine.check_transition(VALID_PREVIOUS, old, new, "group member", error=IllegalTransitionError)


class FencedCommit:
    """What :meth:`GroupMember.commit_offsets` did: ``committed`` ({tp: offset} written), ``refused``
    ({tp: offset} not written: not owned by this member's live session), ``ahead`` ({tp: stored
    offset} already at or beyond the offset given, left alone), ``fenced`` (the session that owned
    them had expired: nothing was written)."""

    __slots__ = ("committed", "refused", "ahead", "fenced")

    def __init__(self):
        self.committed: dict = {}
        self.refused: dict = {}
        self.ahead: dict = {}
        self.fenced = False

    def __repr__(self):
        return (
            f"FencedCommit(committed={self.committed}, refused={self.refused}, ahead={self.ahead}, "
            f"fenced={self.fenced})"
        )


class GroupMember:
    """One member of ZooKeeper consumer group ``group_id`` (see the module doc).

    ``topics``: ``{topic: n_streams}`` or an iterable of topics (1 stream each); or ``topic_filter``:
    a :class:`Whitelist` / :class:`Blacklist` (optionally ``(filter, n_streams)``).  The stream counts are
    registered (Kafka's layout) but partitions are assigned per member; a member spreads its partitions
    over its own streams (see connector.high_level).
    ``strategy``: ``range`` | ``roundrobin`` | ``sticky`` (partition.assignment.strategy).
    ``session_timeout_s``: the ZooKeeper session timeout (zookeeper.session.timeout.ms / 1000).
    ``rebalance_max_retries`` / ``rebalance_backoff_ms``: Kafka's rebalance.max.retries (4) and
    rebalance.backoff.ms (2000).
    Callbacks get a sorted list of (topic, partition): ``on_assign`` after partitions are claimed,
    ``on_revoke`` before they are released by a rebalance or by :meth:`stop` (commit there; not called
    in manual_release mode), ``on_lost`` after a lost session dropped them, ``on_error(exc)`` when a
    rebalance failed.

    Runs on three kinds of thread: the caller's (public methods, start/stop), kazoo's (connection
    listener and watches: they only record work and change state, never block) and the member's
    rebalance thread (registration after LOST, rebalances, claims, callbacks).  Thread-safe: every
    field below ``_lock`` is read and written with ``_lock`` held (``_cond`` is its condition), and
    ``_state`` changes only in :meth:`_transition`; ZooKeeper calls and callbacks are made without
    it.  ``_state`` alone may be read without the lock (one attribute read) by :meth:`is_stable`,
    :attr:`state` and the retry interrupt.  Callbacks run on the member's rebalance thread.
    """

    def __init__(
        self,
        zk_connect: str,
        group_id: str,
        *,
        topics=None,
        topic_filter=None,
        strategy: str = "range",
        consumer_id: str | None = None,
        session_timeout_s: float = 6.0,
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 2000,
        on_assign: Callable | None = None,
        on_revoke: Callable | None = None,
        on_lost: Callable | None = None,
        on_error: Callable | None = None,
        manual_release: bool = False,
        exclude_internal_topics: bool = True,
        connect_timeout_s: float = 30.0,
        credentials=None,
    ):
        if not isinstance(group_id, str) or not group_id or "/" in group_id or group_id in (".", ".."):
            raise ConfigError(f"group.id must be a non-empty name without '/'; got {group_id!r}")
        if strategy not in STRATEGIES:
            raise ConfigError(f"partition.assignment.strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
        if (topics is None) == (topic_filter is None):
            raise ConfigError(
                "give exactly one of topics (a {topic: n_streams} map) or topic_filter (Whitelist/Blacklist)"
            )
        if topic_filter is not None:
            n_streams = 1
            if isinstance(topic_filter, tuple):
                topic_filter, n_streams = topic_filter
            if not isinstance(topic_filter, TopicFilter):
                raise ConfigError(f"topic_filter must be a Whitelist or Blacklist; got {topic_filter!r}")
            _check_streams(topic_filter.regex, n_streams)
            self.pattern = topic_filter.pattern
            self.subscription = {topic_filter.regex: n_streams}
        else:
            if isinstance(topics, str):
                topics = [topics]
            sub = dict(topics) if isinstance(topics, Mapping) else dict.fromkeys(topics, 1)
            if not sub:
                raise ConfigError("topics must name at least one topic")
            for t, n in sub.items():
                if not isinstance(t, str) or not t or "/" in t:
                    raise ConfigError(f"topic names must be non-empty strings without '/'; got {t!r}")
                _check_streams(t, n)
            self.pattern = "static"
            self.subscription = sub
        if not isinstance(rebalance_max_retries, int) or rebalance_max_retries < 1:
            raise ConfigError(f"rebalance.max.retries must be an int >= 1; got {rebalance_max_retries!r}")
        if rebalance_backoff_ms < 0:
            raise ConfigError(f"rebalance.backoff.ms must be >= 0; got {rebalance_backoff_ms!r}")
        self.zk_connect = zk_connect
        self._credentials = credentials  # ZkCredentials (repr hides the password) or None
        self.group_id = group_id
        self.strategy = strategy
        self.consumer_id = consumer_id or default_consumer_id()
        if "/" in self.consumer_id:
            raise ConfigError(f"consumer.id must not contain '/'; got {self.consumer_id!r}")
        self.session_timeout_s = float(session_timeout_s)
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff_s = rebalance_backoff_ms / 1000.0
        self.manual_release = bool(manual_release)
        self.exclude_internal_topics = exclude_internal_topics
        self.connect_timeout_s = connect_timeout_s
        self.on_assign, self.on_revoke, self.on_lost, self.on_error = on_assign, on_revoke, on_lost, on_error
        self._cid = self.consumer_id.encode()

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # -- guarded by self._lock; _state changes only in _transition() --
        self._state = MemberState.NEW
        self._state_since = time.monotonic()  # when _state was entered (SUSPENDED: when disconnected)
        self._state_listeners: list[Callable] = []
        self._owned: set = set()
        self._target: set = set()
        self._topics: set = set()  # topics this member consumes (after the last rebalance)
        self._streams: dict[str, int] = {}
        self._dirty = False  # a full rebalance is due (a watch fired while one was running or pending)
        self._dirty_at: float | None = None  # a delayed rebalance (sticky: owner registry changes)
        self._claim_due: float | None = None
        self._attempts = 0
        self._error: Exception | None = None  # the RebalanceFailedError of state FAILED
        self._epoch = 0  # bumped when ownership is dropped (LOST)
        self._lost: set = set()  # dropped partitions not yet reported to on_lost
        self._registered_session = None
        self._fence_path: str | None = None  # our session's node under paths.consumer_fences (zombie fence)
        self._fence_session = None  # the ZooKeeper session that created _fence_path
        self._disconnected_at: float | None = None  # monotonic time the ZooKeeper connection was lost
        self._thread: threading.Thread | None = None
        self.zk: KazooClient | None = None
        self.rebalances = 0

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> MemberState:
        """The current :class:`MemberState` (a snapshot: it may change as soon as it is read)."""
        return self._state

    def add_state_listener(self, fn: Callable[[MemberState, MemberState], None]) -> None:
        """Call ``fn(old, new)`` on every state change, like kazoo's ``add_listener``.  It runs on the
        thread that made the change (a kazoo thread, the rebalance thread, or the caller of start/stop)
        with the member's lock held: it must be quick, must not block and must not call the member."""
        with self._lock:
            self._state_listeners.append(fn)

    def _transition(self, new: MemberState) -> None:
        """The one method that changes the state; the caller holds ``self._lock``.  Raises
        :class:`IllegalTransitionError` (state unchanged) for a move :data:`VALID_PREVIOUS` forbids."""
        old = self._state
        check_transition(old, new)
        self._state = new
        self._state_since = time.monotonic()
        log.debug("group %s member %s: %s -> %s", self.group_id, self.consumer_id, old.name, new.name)
        for fn in self._state_listeners:
            try:
                fn(old, new)
            except Exception:
                log.exception("group %s member %s: state listener %r failed", self.group_id, self.consumer_id, fn)
        self._cond.notify_all()

    def _closing(self) -> bool:
        """stop() was called (read without the lock: one attribute read; used to interrupt retries)."""
        return self._state in (MemberState.STOPPING, MemberState.STOPPED)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> GroupMember:
        """Connect, register in ``/consumers/[group]/ids`` and start rebalancing (in the background).
        NEW -> REGISTERING -> REBALANCING; if connecting or registering fails the member is NEW again."""
        with self._lock:
            if self._state is not MemberState.NEW:
                raise RuntimeError("GroupMember already started")
            self._transition(MemberState.REGISTERING)
        from pyklog.broker.zk.znode_acls import client_credentials, kazoo_kwargs

        self.zk = KazooClient(
            **kazoo_kwargs(client_credentials(self._credentials)),
            hosts=self.zk_connect,
            timeout=self.session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0},
            command_retry={"max_tries": -1, "delay": 0.05, "max_delay": 1.0, "interrupt": self._closing},
        )
        self.zk.add_listener(self._on_state)
        try:
            self.zk.start(timeout=self.connect_timeout_s)
        except Exception as e:
            self._abandon_start()
            raise ZooKeeperError(f"cannot connect to ZooKeeper at {self.zk_connect!r}: {e}") from e
        try:
            self._register()
        except BaseException:
            self._abandon_start()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"pyklog-group-{self.group_id}-{self.consumer_id}", daemon=True
        )
        with self._cond:
            if self._state is MemberState.REGISTERING:  # else the connection listener or stop() moved on
                self._transition(MemberState.REBALANCING)
        self._request("start")
        self._thread.start()
        return self

    def _abandon_start(self):
        """start() failed: close the client; NEW again, so start may be called again.  If the connection
        listener had moved on (SUSPENDED, LOST) the member is STOPPED instead; if stop() runs meanwhile
        (STOPPING) it finishes the job."""
        self.zk.remove_listener(self._on_state)
        try:
            self.zk.stop()
        finally:
            self.zk.close()
            with self._cond:
                if self._state is MemberState.REGISTERING:
                    self._transition(MemberState.NEW)
                elif self._state in (MemberState.SUSPENDED, MemberState.LOST):
                    self._transition(MemberState.STOPPING)
                    self._transition(MemberState.STOPPED)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop rebalancing, call ``on_revoke`` for everything owned (unless manual_release), then close
        the session, which deletes the registration and every owner node at once.  -> STOPPING -> STOPPED."""
        with self._cond:
            if self._state in (MemberState.NEW, MemberState.STOPPING, MemberState.STOPPED):
                return
            self._transition(MemberState.STOPPING)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            owned = sorted(self._owned)
        if owned and not self.manual_release and self.on_revoke is not None:
            self._callback(self.on_revoke, owned)
        try:
            self.zk.stop()
        finally:
            self.zk.close()
            with self._cond:
                self._owned.clear()
                self._target.clear()
                if self._state is MemberState.STOPPING:  # (a failing start() may have got there first)
                    self._transition(MemberState.STOPPED)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------------ queries

    def assignment(self) -> set:
        """Partitions whose owner node this member holds now."""
        with self._lock:
            return set(self._owned)

    def target(self) -> set:
        """What the last rebalance assigned to this member."""
        with self._lock:
            return set(self._target)

    def to_release(self) -> set:
        """Owned partitions the last rebalance took away (manual_release mode: waiting for :meth:`release`)."""
        with self._lock:
            return self._owned - self._target

    def streams(self) -> dict[str, int]:
        """{topic: n_streams} for the topics this member consumes (filters resolved at the last rebalance)."""
        with self._lock:
            return dict(self._streams)

    @property
    def error(self) -> Exception | None:
        """The rebalance failure while the member is FAILED (None in every other state)."""
        with self._lock:
            return self._error if self._state is MemberState.FAILED else None

    def is_stable(self) -> bool:
        """The member is STABLE: no rebalance pending and the owned partitions equal the target."""
        return self._state is MemberState.STABLE

    def wait_stable(self, timeout: float = 30.0) -> bool:
        """Wait until the member is STABLE (no rebalance pending, the owned partitions equal the
        target).  Raises the RebalanceFailedError of a FAILED member.  In manual_release mode the caller
        must release :meth:`to_release` for this to happen.  Returns False on timeout or once stopping."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                state = self._state
                if state is MemberState.FAILED:
                    raise self._error
                if state is MemberState.STABLE:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or state in (MemberState.STOPPING, MemberState.STOPPED):
                    return False
                self._cond.wait(min(left, 0.2))

    # ------------------------------------------------------------------ manual release

    def release(self, partitions: Iterable) -> None:
        """Give up ownership of ``partitions`` (those this member owns; others are ignored).  A released
        partition still in :meth:`target` is claimed again by the background loop."""
        tps = {(t, int(p)) for t, p in partitions}
        with self._cond:
            tps &= self._owned
            if not tps:
                return
            if self._state is MemberState.STABLE:  # owned will differ from the target until re-claimed
                self._transition(MemberState.REBALANCING)
        self._delete_owner_nodes(tps)
        with self._cond:
            if self._state in (MemberState.REBALANCING, MemberState.FAILED):
                self._claim_due = time.monotonic()  # a claim pass re-claims or settles on STABLE
                self._cond.notify_all()

    # ------------------------------------------------------------------ fenced commits (zombie fence)

    @property
    def epoch(self) -> int:
        """How many times this member dropped its ownership (LOST).  A caller that remembers the epoch
        of its last look at :meth:`assignment` can tell that partitions it owns now were owned by
        another member in between (their committed offsets may have moved)."""
        with self._lock:
            return self._epoch

    def disconnected_since(self) -> float | None:
        """The monotonic time this member's ZooKeeper connection was lost, or None while connected.
        While disconnected the member cannot tell whether its session still lives (it drops its
        ownership after the session timeout, LOST); a caller that reads from the brokers may keep
        reading what it owned until ZooKeeper answers again, as a Kafka consumer keeps fetching while
        its coordinator is away.  Caller's thread; thread-safe."""
        with self._lock:
            return self._disconnected_at

    def _create_fence(self):
        """Create this session's fence node (rebalance thread or start()): an ephemeral sequential
        node under ``paths.consumer_fences``, so its name belongs to one session only (sequence
        numbers are never reused).  Kept when the session already has one."""
        session = self._session_id()
        with self._lock:
            if self._fence_path is not None and self._fence_session == session:
                return
        path = self.zk.retry(
            self.zk.create,
            paths.consumer_fence_prefix(self.group_id, self.consumer_id),
            b"",
            ephemeral=True,
            sequence=True,
            makepath=True,
        )
        try:
            _, stat = self.zk.retry(self.zk.get, path)
            owner = stat.ephemeralOwner
        except NoNodeError:  # the session that created it is gone already: no fence, commits refused
            path, owner = None, None
        with self._lock:
            self._fence_path, self._fence_session = path, owner
        log.debug(
            "group %s member %s: fence %s (session %s)",
            self.group_id,
            self.consumer_id,
            path,
            f"{owner:#x}" if owner else None,
        )

    def _fence_locked(self):
        """(fence path, session) when this member may act as the owner of what it holds, else None:
        it has a fence of the session kazoo uses now and is neither LOST nor re-registering."""
        if self._state not in (
            MemberState.REBALANCING,
            MemberState.STABLE,
            MemberState.FAILED,
            MemberState.SUSPENDED,
            MemberState.STOPPING,
        ):  # stop(): on_revoke commits
            return None
        if self._fence_path is None or self._fence_session is None:
            return None
        if self._fence_session != self._session_id():
            return None
        return self._fence_path, self._fence_session

    def session_valid_cached(self) -> bool:
        """Whether this member, by its own view (no round trip), holds the fence of the session kazoo
        uses now and may act as the owner of what it holds: False when LOST, re-registering, or on
        another session.  A process paused past its session still answers True until it has heard
        from the server: :meth:`session_valid` asks.  Caller's thread; thread-safe."""
        with self._lock:
            return self._fence_locked() is not None

    def session_valid(self) -> bool:
        """Whether the ZooKeeper session that owns this member's partitions is alive now, asked of the
        server (one round trip, no retry on a new session): the fence node of the session exists.
        False after the session expired, even when kazoo has not noticed yet (a process paused past
        its session timeout, a "zombie"): answering the request is how it finds out, and its LOST
        handling then drops the ownership.  Raises kazoo's ConnectionLoss when ZooKeeper cannot be
        reached (unknown).  Caller's thread; thread-safe."""
        with self._lock:
            fence = self._fence_locked()
        if fence is None:
            return False
        try:
            return self.zk.exists(fence[0]) is not None and self._session_id() == fence[1]
        except (SessionExpiredError, ConnectionClosedError):
            return False

    def commit_offsets(self, offsets: Mapping, *, attempts: int = 5) -> FencedCommit:
        """Store the group's offsets in ZooKeeper (``/consumers/[group]/offsets/[topic]/[partition]``)
        only for partitions this member owns through its live session, and never backwards.

        For each partition: read its owner node (it must hold our consumer id and belong to our
        session) and its offset node (an offset already at or beyond the new one is left alone); then
        ONE multi-op checks our fence node (which exists only while our session lives), checks each
        owner node's version and sets each offset node at the version read (or creates it).  So a
        member whose session expired (a zombie resumed after SIGSTOP) commits nothing, even when kazoo
        has already opened a new session for it, and a concurrent commit by anyone is never
        overwritten by a smaller offset: a version conflict re-reads and tries again (``attempts``).
        A lost connection is waited out (kazoo reconnects; if the session did not survive, nothing is
        committed); ZooKeeper unreachable for the session timeout raises :class:`ZooKeeperError`
        (retriable; a multi-op that did land is seen as "ahead" by the next try).
        Returns what was committed, refused (not owned, or fenced) and already ahead.
        Caller's thread; thread-safe (ZooKeeper calls without the lock)."""
        todo = {(t, int(p)): int(off) for (t, p), off in offsets.items()}
        result = FencedCommit()
        if not todo:
            return result
        with self._lock:
            fence = self._fence_locked()
        if fence is None:
            return self._refuse_all(result, todo, f"the member's session is not live (state {self._state.name})")
        deadline = Deadline.after(max(self.session_timeout_s, 1.0))
        conflicts = 0
        while True:
            try:
                done = self._commit_once(fence, todo, result)
            except (SessionExpiredError, ConnectionClosedError):
                return self._refuse_all(
                    result, todo, "the ZooKeeper session that owned them has expired (another member may own them now)"
                )
            except KazooException as e:  # ConnectionLoss, OperationTimeout: outcome unknown, try again
                if deadline.expired():
                    raise ZooKeeperError(
                        f"committing offsets of group {self.group_id} failed: ZooKeeper "
                        f"unreachable ({type(e).__name__})"
                    ) from e
                time.sleep(0.1)
                with self._lock:
                    now = self._fence_locked()
                if now != fence:  # the session was lost meanwhile
                    return self._refuse_all(result, todo, "the ZooKeeper session that owned them was lost")
                continue
            if done is None:  # our fence node is gone: the session has expired
                return self._refuse_all(
                    result, todo, "the ZooKeeper session that owned them has expired (another member may own them now)"
                )
            if done:
                return result
            conflicts += 1
            if conflicts >= attempts:
                return self._refuse_all(result, todo, f"{attempts} conflicting attempts", fenced=False)

    def _commit_once(self, fence, todo: dict, result: FencedCommit):
        """One read-check-write pass of :meth:`commit_offsets`; moves entries of ``todo`` into
        ``result``.  True when done, False after a version conflict (read again), None when the
        fence check failed (our session is gone)."""
        fence_path, session = fence
        zk = self.zk
        owners = {tp: zk.get_async(paths.partition_owner(self.group_id, *tp)) for tp in sorted(todo)}
        stored = {tp: zk.get_async(paths.consumer_offset(self.group_id, *tp)) for tp in sorted(todo)}
        plan = []  # (tp, owner version, offset version or None to create)
        not_owned = []
        for tp in sorted(todo):
            try:
                data, stat = owners[tp].get()
            except NoNodeError:
                data, stat = None, None
            if stat is None or data != self._cid or stat.ephemeralOwner != session:
                not_owned.append(tp)
                continue
            try:
                odata, ostat = stored[tp].get()
                current = decode_consumer_offset(odata, paths.consumer_offset(self.group_id, *tp))
            except NoNodeError:
                current, ostat = None, None
            if current is not None and current >= todo[tp]:
                result.ahead[tp] = current
                continue
            plan.append((tp, stat.version, None if ostat is None else ostat.version))
        for tp in not_owned:
            result.refused[tp] = todo.pop(tp)
        for tp in result.ahead:
            todo.pop(tp, None)
        if not_owned:
            log.warning(
                "group %s member %s: not committing %s: owned by another member now",
                self.group_id,
                self.consumer_id,
                _fmt(not_owned),
            )
        if not plan:
            return True
        for tp, _, over in plan:
            if over is None:  # parents of a new offset node, outside the multi-op (harmless)
                zk.retry(zk.ensure_path, paths.consumer_offsets(self.group_id, tp[0]))
        tx = zk.transaction()
        tx.check(fence_path, 0)
        for tp, owner_version, _ in plan:
            tx.check(paths.partition_owner(self.group_id, *tp), owner_version)
        for tp, _, over in plan:
            path, data = paths.consumer_offset(self.group_id, *tp), encode_consumer_offset(todo[tp])
            if over is None:
                tx.create(path, data)
            else:
                tx.set_data(path, data, version=over)
        outcome = tx.commit()
        failed = [r for r in outcome if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failed:
            for tp, _, _ in plan:
                result.committed[tp] = todo.pop(tp)
            return True
        if isinstance(outcome[0], Exception) and not isinstance(outcome[0], RolledBackError):
            return None
        log.debug("group %s member %s: commit conflict (%s); reading again", self.group_id, self.consumer_id, failed[0])
        return False

    def _refuse_all(self, result, todo, why, fenced=True):
        if todo:
            result.refused.update(todo)
            result.fenced = fenced
            log.warning("group %s member %s: not committing %s: %s", self.group_id, self.consumer_id, _fmt(todo), why)
            todo.clear()
        return result

    # ------------------------------------------------------------------ events (kazoo threads: no blocking)

    def _on_state(self, state):
        """kazoo connection listener: SUSPENDED keeps ownership, LOST drops it, CONNECTED resumes."""
        with self._cond:
            current = self._state
            if state == KazooState.CONNECTED:
                self._disconnected_at = None
            elif self._disconnected_at is None:
                self._disconnected_at = time.monotonic()
            if current in (MemberState.NEW, MemberState.STOPPING, MemberState.STOPPED):
                return
            if state == KazooState.LOST:
                self._registered_session = None
                if current is not MemberState.LOST:
                    self._lose_locked("lost its ZooKeeper session")
            elif state == KazooState.SUSPENDED:
                if current is not MemberState.LOST:
                    self._transition(MemberState.SUSPENDED)
            elif state == KazooState.CONNECTED:
                if current is MemberState.LOST:
                    self._transition(MemberState.REGISTERING)
                elif current is MemberState.SUSPENDED:  # the session survived
                    self._transition(MemberState.REBALANCING)
                    self._dirty = True
                elif current is not MemberState.REGISTERING:
                    self._need_rebalance_locked()
            self._cond.notify_all()

    def _lose_locked(self, why):
        """Drop all ownership at once (another member may own our partitions already) -> LOST."""
        if self._owned:
            log.warning(
                "consumer %s of group %s %s: dropping %d partitions",
                self.consumer_id,
                self.group_id,
                why,
                len(self._owned),
            )
        self._lost |= self._owned
        self._owned = set()
        self._epoch += 1
        self._transition(MemberState.LOST)

    def _need_rebalance_locked(self):
        self._dirty = True
        if self._state in (MemberState.STABLE, MemberState.FAILED):
            self._transition(MemberState.REBALANCING)

    def _on_watch(self, event):
        self._request(f"{event.type} {event.path}")

    def _on_owners_changed(self, event):
        # sticky reads the owner registry: recompute once claims and releases have settled
        with self._cond:
            if not self._dirty and self._dirty_at is None:
                self._dirty_at = time.monotonic() + OWNER_SETTLE_S
                if self._state is MemberState.STABLE:
                    self._transition(MemberState.REBALANCING)
                self._cond.notify_all()

    def _on_owner_event(self, event):
        if event.type == EventType.DELETED:
            self._request(None, claim_only=True)

    def _request(self, why, claim_only=False):
        with self._cond:
            if claim_only:
                if self._claim_due is not None or self._owned != self._target:
                    self._claim_due = time.monotonic()
            else:
                if why:
                    log.debug("group %s member %s: rebalance triggered by %s", self.group_id, self.consumer_id, why)
                self._need_rebalance_locked()
            self._cond.notify_all()

    # ------------------------------------------------------------------ rebalance thread

    def _run(self):
        """The rebalance thread: reports dropped partitions, registers again after LOST, rebalances and
        claims; it ends the pass by settling the state (:meth:`_settle_locked`)."""
        S = MemberState
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    state = self._state
                    if state in (S.STOPPING, S.STOPPED, S.REGISTERING) or self._lost:
                        break
                    if state is S.SUSPENDED:
                        # disconnected: the session may expire without us hearing of it; once it could
                        # have, another member may own our partitions, so we stop owning them
                        if now - self._state_since >= self.session_timeout_s:
                            self._lose_locked(
                                f"was disconnected from ZooKeeper for {now - self._state_since:.1f}s "
                                f"(session timeout {self.session_timeout_s:.1f}s)"
                            )
                            continue
                        self._cond.wait(0.1)
                        continue
                    if state is S.LOST:  # the CONNECTED listener moves on to REGISTERING
                        self._cond.wait(0.5)
                        continue
                    if self._dirty:
                        break
                    if self._claim_due is not None and now >= self._claim_due:
                        break
                    if self._dirty_at is not None and now >= self._dirty_at:
                        break
                    due = [d for d in (self._claim_due, self._dirty_at) if d is not None]
                    self._cond.wait(0.5 if not due else min(max(0.0, min(due) - now), 0.5))
                if self._closing():
                    return
                lost, self._lost = self._lost, set()
            try:
                if lost and self.on_lost is not None:
                    self._callback(self.on_lost, sorted(lost))
                with self._cond:
                    state = self._state
                    if state in (S.STOPPING, S.STOPPED):
                        return
                    if state in (S.SUSPENDED, S.LOST):  # work resumes on reconnect
                        continue
                    register = state is S.REGISTERING
                    full = (
                        register or self._dirty or (self._dirty_at is not None and time.monotonic() >= self._dirty_at)
                    )
                    if full:
                        self._dirty = False
                        self._dirty_at = None
                        if state in (S.STABLE, S.FAILED):
                            self._transition(S.REBALANCING)
                if register:
                    self._register_and_resume()
                if full:
                    self._rebalance()
                else:
                    self._claim()
            except _ZK_ERRORS as e:
                if not self._closing():
                    log.warning(
                        "group %s member %s: ZooKeeper error during rebalance (%s); retrying",
                        self.group_id,
                        self.consumer_id,
                        e,
                    )
                    with self._cond:
                        self._need_rebalance_locked()
                        self._cond.wait(0.2)
            except Exception:  # a bug or bad registry data must not kill the member silently
                log.exception("group %s member %s: rebalance failed", self.group_id, self.consumer_id)
                with self._cond:
                    self._need_rebalance_locked()
                    self._cond.wait(max(self.rebalance_backoff_s, 0.2))

    def _session_id(self):
        cid = self.zk.client_id
        return cid[0] if cid else None

    def _register(self):
        """Create our ephemeral ``ids`` node; NodeExists from our own session is success, from an older
        session (not yet expired) we wait for ZooKeeper to delete it."""
        path = paths.consumer_id(self.group_id, self.consumer_id)
        data = registration_json(self.subscription, self.pattern)
        deadline = Deadline.after(max(3 * self.session_timeout_s, 10.0))
        wait_for_expiry = Backoff.constant(0.25)
        while not self._closing():
            session = self._session_id()
            try:
                self.zk.retry(self.zk.create, path, data, ephemeral=True, makepath=True)
                self._registered_session = session
                self._create_fence()
                log.info(
                    "consumer %s registered in group %s (%s %s)",
                    self.consumer_id,
                    self.group_id,
                    self.pattern,
                    self.subscription,
                )
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.retry(self.zk.get, path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == session:
                    self._registered_session = session
                    self._create_fence()
                    return
                if deadline.expired():
                    raise ZooKeeperError(  # noqa: B904 - the wait ran out; the lookup error is not the causef"{path} is held by ZooKeeper session {stat.ephemeralOwner:#x}, "
                        f"expected ours ({session:#x}) or none; is another consumer using "
                        f"consumer id {self.consumer_id!r}?"
                    )
                log.info("%s still held by an older session %#x; waiting for it to expire", path, stat.ephemeralOwner)
                time.sleep(wait_for_expiry.next())

    def _register_and_resume(self):
        """Register (again) on the rebalance thread: REBALANCING -> REGISTERING -> REBALANCING (after LOST
        the state is REGISTERING already).  Leaves other states (SUSPENDED, LOST, STOPPING) alone."""
        with self._cond:
            if self._state is MemberState.REBALANCING:
                self._transition(MemberState.REGISTERING)
        self._register()
        with self._cond:
            if self._state is MemberState.REGISTERING:
                self._transition(MemberState.REBALANCING)

    def _children(self, path, watch=None):
        try:
            return self.zk.retry(self.zk.get_children, path, watch=watch)
        except NoNodeError:
            if self.zk.retry(self.zk.exists, path, watch=watch) is None:
                return []
            try:
                return self.zk.retry(self.zk.get_children, path, watch=watch)
            except NoNodeError:
                return []

    def _read_members(self):
        out = {}
        for cid in sorted(self._children(paths.consumer_ids(self.group_id), self._on_watch)):
            try:
                data, _ = self.zk.retry(self.zk.get, paths.consumer_id(self.group_id, cid))
            except NoNodeError:
                continue
            try:
                out[cid] = parse_registration(data, paths.consumer_id(self.group_id, cid))
            except ValueError as e:
                log.warning("group %s: ignoring member %s with a bad registration: %s", self.group_id, cid, e)
        return out

    def _read_partition_counts(self, topics):
        counts = {}
        for t in sorted(topics):
            try:
                data, _ = self.zk.retry(self.zk.get, paths.topic(t), watch=self._on_watch)
            except NoNodeError:
                self.zk.retry(self.zk.exists, paths.topic(t), watch=self._on_watch)
                continue
            try:
                counts[t] = partition_count(data, t)
            except ValueError as e:
                log.warning("group %s: ignoring topic %s: %s", self.group_id, t, e)
        return counts

    def _read_owners(self, topics, member_ids):
        owned: dict[str, list] = {}
        for t in sorted(topics):
            for p in self._children(paths.partition_owners(self.group_id, t), self._on_owners_changed):
                try:
                    data, _ = self.zk.retry(self.zk.get, paths.partition_owner(self.group_id, t, int(p)))
                except (NoNodeError, ValueError):
                    continue
                owner = data.decode(errors="replace")
                if owner in member_ids:
                    owned.setdefault(owner, []).append((t, int(p)))
        return owned

    def _rebalance(self):
        if self._registered_session is None or self._registered_session != self._session_id():
            self._register_and_resume()
        members = self._read_members()
        if self.consumer_id not in members:
            log.warning("group %s: own registration of %s missing; registering again", self.group_id, self.consumer_id)
            self._registered_session = None
            self._register_and_resume()
            members = self._read_members()
        self._children(paths.BROKER_IDS, self._on_watch)
        all_topics = self._children(paths.BROKER_TOPICS, self._on_watch)
        subs = {}
        for cid, (pattern, sub) in members.items():
            try:
                subs[cid] = topics_of(pattern, sub, all_topics, self.exclude_internal_topics)
            except ConfigError as e:
                log.warning("group %s: ignoring member %s: %s", self.group_id, cid, e)
                subs[cid] = set()
        relevant = set().union(*subs.values()) if subs else set()
        counts = self._read_partition_counts(relevant)
        owned = self._read_owners(counts, subs) if self.strategy == "sticky" else None
        result = assign(self.strategy, subs, counts, owned)
        target = set(result.get(self.consumer_id, ()))
        mine = subs.get(self.consumer_id, set())
        if self.pattern == "static":
            streams = {t: n for t, n in self.subscription.items() if t in counts}
        else:
            n = next(iter(self.subscription.values()))
            streams = {t: n for t in sorted(mine) if t in counts}
        with self._cond:
            self._target = target
            self._topics = mine
            self._streams = streams
            self._attempts = 0
            self._error = None
            self._claim_due = None
            revoke = self._owned - target
            self.rebalances += 1
        log.info(
            "group %s member %s: rebalance %d with %d members: target %d partitions, releasing %d",
            self.group_id,
            self.consumer_id,
            self.rebalances,
            len(members),
            len(target),
            0 if self.manual_release else len(revoke),
        )
        if revoke and not self.manual_release:
            if self.on_revoke is not None:
                self._callback(self.on_revoke, sorted(revoke))
            self._delete_owner_nodes(revoke)
        self._claim()

    def _claim(self):
        with self._cond:
            wanted = sorted(self._target - self._owned)
            epoch = self._epoch
        got, blocked = [], []
        session = self._session_id()
        for tp in wanted:
            if self._closing():
                return
            if self._claim_one(tp, session):
                got.append(tp)
            else:
                blocked.append(tp)
        with self._cond:
            if self._epoch != epoch:  # ownership was dropped meanwhile: claims are void, rebalance again
                self._need_rebalance_locked()
                return
            self._owned.update(got)
            if blocked:
                self._attempts += 1
                if not self.manual_release and self._attempts >= self.rebalance_max_retries:
                    holders = ", ".join(f"{t}-{p}" for t, p in blocked[:10])
                    err = RebalanceFailedError(
                        f"consumer {self.consumer_id} of group {self.group_id} could not claim {len(blocked)} "
                        f"partitions ({holders}) still owned by other consumers after "
                        f"{self._attempts} attempts (rebalance.max.retries={self.rebalance_max_retries}, "
                        f"rebalance.backoff.ms={int(self.rebalance_backoff_s * 1000)})"
                    )
                    self._error = err
                    self._claim_due = None
                else:
                    err = None
                    self._claim_due = time.monotonic() + self.rebalance_backoff_s
            else:
                err = None
                self._attempts = 0
                self._claim_due = None
                self._error = None
            self._settle_locked(err)
            self._cond.notify_all()
        if got:
            log.info("group %s member %s claimed %s", self.group_id, self.consumer_id, _fmt(got))
            if self.on_assign is not None:
                self._callback(self.on_assign, got)
        if err is not None:
            log.error("%s", err)
            if self.on_error is not None:
                self._callback(self.on_error, err)

    def _settle_locked(self, failure):
        """End of a rebalance or claim pass: REBALANCING/FAILED -> FAILED (``failure``), STABLE (owned
        equals target, nothing pending) or REBALANCING (claims or a rebalance still due).  Other states
        (SUSPENDED, LOST, REGISTERING, STOPPING) are left to the connection listener and stop()."""
        state = self._state
        if state not in (MemberState.REBALANCING, MemberState.FAILED):
            return
        if failure is not None:
            if state is MemberState.REBALANCING:
                self._transition(MemberState.FAILED)
            return
        pending = (
            self._dirty or self._dirty_at is not None or self._claim_due is not None or self._owned != self._target
        )
        settled = MemberState.REBALANCING if pending else MemberState.STABLE
        if settled is not state:
            self._transition(settled)

    def _claim_one(self, tp, session) -> bool:
        t, p = tp
        path = paths.partition_owner(self.group_id, t, p)
        for _ in range(3):
            try:
                self.zk.retry(self.zk.create, path, self._cid, ephemeral=True, makepath=True)
                return True
            except NodeExistsError:
                pass
            try:
                _, stat = self.zk.retry(self.zk.get, path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == session:
                return True  # ours: created before a reconnect
            # held by another member: be told at once when it lets go
            if self.zk.retry(self.zk.exists, path, watch=self._on_owner_event) is None:
                continue
            return False
        return False

    def _delete_owner_nodes(self, tps):
        session = self._session_id()
        for t, p in sorted(tps):
            path = paths.partition_owner(self.group_id, t, p)
            try:
                _, stat = self.zk.retry(self.zk.get, path)
                if stat.ephemeralOwner == session:
                    self.zk.retry(self.zk.delete, path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            except (KazooZookeeperError, *_ZK_ERRORS) as e:
                log.warning("could not delete owner node %s: %s (it goes with the session)", path, e)
            with self._cond:
                self._owned.discard((t, p))
        log.info("group %s member %s released %s", self.group_id, self.consumer_id, _fmt(tps))

    def _callback(self, fn, arg):
        try:
            fn(arg)
        except Exception:
            log.exception("group %s member %s: callback %r failed", self.group_id, self.consumer_id, fn)


def _check_streams(name, n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"number of streams for {name!r} must be an int >= 1; got {n!r}")


def _fmt(tps, limit=12):
    s = sorted(tps)
    text = ", ".join(f"{t}-{p}" for t, p in s[:limit])
    return text + (f" (+{len(s) - limit} more)" if len(s) > limit else "")
