"""The group coordinator: Kafka's classic consumer group protocol on the broker.

* :mod:`.state`: :class:`GroupState` and its table of valid previous states.
* :mod:`.metadata`: a group's and its members' fields (:class:`~.metadata.GroupMetadata`,
  :class:`~.metadata.MemberMetadata`), guarded by the group's lock.
* :mod:`.coordinator`: :class:`GroupCoordinator`, the JoinGroup / SyncGroup rebalance protocol,
  static members rejoining, the join timers; OffsetCommit validation.
* :mod:`.sessions`: its base class :class:`~.sessions.MemberSessions`: heartbeats, session timers,
  member removal, LeaveGroup.
* :mod:`.admin`: its base class :class:`~.admin.GroupAdministration`: offset expiry and ListGroups /
  DescribeGroups / DeleteGroups / OffsetDelete.
* :mod:`.requests`: the wire side: request bodies to method calls, answers and error answers to
  response bodies.
"""

from pyklog.broker.coordinator.group.coordinator import GROUP_API_KEYS, GroupCoordinator, error_response
from pyklog.broker.coordinator.group.state import GroupState

__all__ = ["GROUP_API_KEYS", "GroupCoordinator", "GroupState", "error_response"]
