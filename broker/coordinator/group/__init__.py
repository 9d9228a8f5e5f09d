"""The group coordinator: Kafka's classic consumer group protocol on the broker.

* :mod:`.state`: :class:`GroupState` and its table of valid previous states.
* :mod:`.metadata`: a group's and its members' fields (:class:`~.metadata.GroupMetadata`,
  :class:`~.metadata.MemberMetadata`), guarded by the group's lock.
* :mod:`.coordinator`: :class:`GroupCoordinator`, the JoinGroup / SyncGroup / Heartbeat /
  LeaveGroup handling, rebalances and timers; OffsetCommit validation.
* :mod:`.admin`: its base class, offset expiry and ListGroups / DescribeGroups / DeleteGroups /
  OffsetDelete.
"""

from pyklog.broker.coordinator.group.coordinator import GROUP_API_KEYS, GroupCoordinator, error_response
from pyklog.broker.coordinator.group.state import GroupState

__all__ = ["GROUP_API_KEYS", "GroupCoordinator", "GroupState", "error_response"]
