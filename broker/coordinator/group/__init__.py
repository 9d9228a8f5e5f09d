"""The group coordinator (Kafka's classic consumer group protocol); see :mod:`.coordinator`."""
from pyklog.broker.coordinator.group.coordinator import (  # noqa: F401
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    GROUP_API_KEYS,
    PREPARING_REBALANCE,
    STABLE,
    GroupCoordinator,
    error_response,
)
