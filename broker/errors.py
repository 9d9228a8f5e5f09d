"""One exception root for pyklog, with Kafka's numeric error codes.

Every error pyklog raises derives from :class:`PyklogError`.  Errors that travel on the wire
carry Kafka's error code (``code``) so a request handler can put it in a response and a client
can turn a response code back into an exception with :func:`error_for_code`.  ``retriable``
says whether repeating the same operation later may succeed (Kafka's RetriableException).

Codes are those of ``org.apache.kafka.common.protocol.Errors``.
"""

from __future__ import annotations


class PyklogError(Exception):
    """Root of all pyklog errors.  ``code`` is Kafka's error code (-1 = UNKNOWN_SERVER_ERROR)."""

    code: int = -1
    retriable: bool = False
    name: str = "UNKNOWN_SERVER_ERROR"


_BY_CODE: dict[int, type[PyklogError]] = {}


def _wire(code: int, name: str, retriable: bool = False):
    def deco(cls):
        cls.code = code
        cls.name = name
        cls.retriable = retriable
        _BY_CODE[code] = cls
        return cls

    return deco


class UnknownServerError(PyklogError):
    pass


_BY_CODE[-1] = UnknownServerError


@_wire(1, "OFFSET_OUT_OF_RANGE")
class OffsetOutOfRangeError(PyklogError):
    pass


@_wire(2, "CORRUPT_MESSAGE", retriable=True)
class CorruptRecordError(PyklogError):
    """A record batch or message failed validation (CRC, length, magic, framing)."""


@_wire(3, "UNKNOWN_TOPIC_OR_PARTITION", retriable=True)
class UnknownTopicOrPartitionError(PyklogError):
    pass


@_wire(4, "INVALID_FETCH_SIZE")
class InvalidFetchSizeError(PyklogError):
    pass


@_wire(5, "LEADER_NOT_AVAILABLE", retriable=True)
class LeaderNotAvailableError(PyklogError):
    pass


@_wire(6, "NOT_LEADER_OR_FOLLOWER", retriable=True)
class NotLeaderOrFollowerError(PyklogError):
    pass


@_wire(7, "REQUEST_TIMED_OUT", retriable=True)
class RequestTimedOutError(PyklogError):
    pass


@_wire(10, "MESSAGE_TOO_LARGE")
class MessageTooLargeError(PyklogError):
    pass


@_wire(12, "OFFSET_METADATA_TOO_LARGE")
class OffsetMetadataTooLargeError(PyklogError):
    """An offset commit's metadata string is longer than offset.metadata.max.bytes."""


@_wire(24, "INVALID_GROUP_ID")
class InvalidGroupIdError(PyklogError):
    pass


@_wire(13, "NETWORK_EXCEPTION", retriable=True)
class NetworkError(PyklogError):
    """The connection to a broker failed or was closed."""


@_wire(14, "COORDINATOR_LOAD_IN_PROGRESS", retriable=True)
class CoordinatorLoadInProgressError(PyklogError):
    pass


@_wire(15, "COORDINATOR_NOT_AVAILABLE", retriable=True)
class CoordinatorNotAvailableError(PyklogError):
    pass


@_wire(16, "NOT_COORDINATOR", retriable=True)
class NotCoordinatorError(PyklogError):
    pass


@_wire(17, "INVALID_TOPIC_EXCEPTION")
class InvalidTopicError(PyklogError):
    pass


@_wire(18, "RECORD_LIST_TOO_LARGE")
class RecordListTooLargeError(PyklogError):
    pass


@_wire(19, "NOT_ENOUGH_REPLICAS", retriable=True)
class NotEnoughReplicasError(PyklogError):
    pass


@_wire(20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", retriable=True)
class NotEnoughReplicasAfterAppendError(PyklogError):
    pass


@_wire(22, "ILLEGAL_GENERATION")
class IllegalGenerationError(PyklogError):
    pass


@_wire(25, "UNKNOWN_MEMBER_ID")
class UnknownMemberIdError(PyklogError):
    pass


@_wire(28, "INVALID_COMMIT_OFFSET_SIZE")
class InvalidCommitOffsetSizeError(PyklogError):
    pass


@_wire(29, "TOPIC_AUTHORIZATION_FAILED")
class TopicAuthorizationFailedError(PyklogError):
    pass


@_wire(30, "GROUP_AUTHORIZATION_FAILED")
class GroupAuthorizationFailedError(PyklogError):
    pass


@_wire(31, "CLUSTER_AUTHORIZATION_FAILED")
class ClusterAuthorizationFailedError(PyklogError):
    pass


@_wire(54, "SECURITY_DISABLED")
class SecurityDisabledError(PyklogError):
    """An ACL API on a broker without an authorizer (``authorizer.class.name`` unset)."""


@_wire(33, "UNSUPPORTED_SASL_MECHANISM")
class UnsupportedSaslMechanismError(PyklogError):
    pass


@_wire(34, "ILLEGAL_SASL_STATE")
class IllegalSaslStateError(PyklogError):
    pass


@_wire(35, "UNSUPPORTED_VERSION")
class UnsupportedVersionError(PyklogError):
    pass


@_wire(36, "TOPIC_ALREADY_EXISTS")
class TopicAlreadyExistsError(PyklogError):
    pass


@_wire(37, "INVALID_PARTITIONS")
class InvalidPartitionsError(PyklogError):
    pass


@_wire(38, "INVALID_REPLICATION_FACTOR")
class InvalidReplicationFactorError(PyklogError):
    pass


@_wire(39, "INVALID_REPLICA_ASSIGNMENT")
class InvalidReplicaAssignmentError(PyklogError):
    pass


@_wire(40, "INVALID_CONFIG")
class InvalidConfigError(PyklogError):
    pass


@_wire(41, "NOT_CONTROLLER", retriable=True)
class NotControllerError(PyklogError):
    pass


@_wire(42, "INVALID_REQUEST")
class InvalidRequestError(PyklogError):
    pass


@_wire(43, "UNSUPPORTED_FOR_MESSAGE_FORMAT")
class UnsupportedForMessageFormatError(PyklogError):
    pass


@_wire(45, "OUT_OF_ORDER_SEQUENCE_NUMBER")
class OutOfOrderSequenceError(PyklogError):
    pass


@_wire(46, "DUPLICATE_SEQUENCE_NUMBER")
class DuplicateSequenceError(PyklogError):
    pass


@_wire(47, "INVALID_PRODUCER_EPOCH")
class InvalidProducerEpochError(PyklogError):
    pass


@_wire(59, "UNKNOWN_PRODUCER_ID")
class UnknownProducerIdError(PyklogError):
    pass


@_wire(74, "FENCED_LEADER_EPOCH", retriable=True)
class FencedLeaderEpochError(PyklogError):
    pass


@_wire(75, "UNKNOWN_LEADER_EPOCH", retriable=True)
class UnknownLeaderEpochError(PyklogError):
    """The request's current leader epoch is newer than the broker's (KIP-320): the broker has
    not yet learned of the leader change; the client retries."""


@_wire(76, "UNSUPPORTED_COMPRESSION_TYPE")
class UnsupportedCompressionTypeError(PyklogError):
    pass


@_wire(87, "INVALID_RECORD")
class InvalidRecordError(PyklogError):
    pass


# Errors that never travel on the wire (local conditions).


class ConfigError(PyklogError):
    """An unknown or invalid configuration setting (server.properties, client or Spark options)."""


class ZooKeeperError(PyklogError):
    """ZooKeeper is unreachable, the session expired, or a registry node is in an unexpected state."""

    retriable = True


class BrokerIdInUseError(PyklogError):
    """Another live broker already registered this broker.id in ZooKeeper."""


class RebalanceFailedError(PyklogError):
    """A consumer could not claim its partitions within rebalance.max.retries."""


class DataLossError(PyklogError):
    """Offsets a reader expected are gone (retention, topic recreated)."""


def error_for_code(code: int, message: str = "") -> PyklogError:
    """Build the exception for Kafka error ``code`` (code 0 is not an error: ValueError)."""
    if code == 0:
        raise ValueError("error code 0 means NONE, not an error")
    cls = _BY_CODE.get(code)
    if cls is None:
        err = UnknownServerError(message or f"Kafka error code {code}")
        err.code = code
        return err
    return cls(message or cls.name)


def raise_for_code(code: int, message: str = "") -> None:
    """Raise the exception for ``code`` unless it is 0 (NONE)."""
    if code:
        raise error_for_code(code, message)


@_wire(56, "KAFKA_STORAGE_ERROR", retriable=True)
class KafkaStorageError(PyklogError):
    """A log directory or file could not be used (I/O error, the log is closed)."""


@_wire(21, "INVALID_REQUIRED_ACKS")
class InvalidRequiredAcksError(PyklogError):
    """Produce acks must be 0, 1 or -1."""


@_wire(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
class TransactionalIdAuthorizationFailedError(PyklogError):
    """The transactional id may not be used (pyklog answers it while it has no transaction
    coordinator: stock clients treat it as fatal and stop at once)."""


@_wire(73, "TOPIC_DELETION_DISABLED")
class TopicDeletionDisabledError(PyklogError):
    """DeleteTopics on a broker with delete.topic.enable=false."""


# Group membership (broker.coordinator.group.coordinator; Kafka's classic group protocol).


@_wire(23, "INCONSISTENT_GROUP_PROTOCOL")
class InconsistentGroupProtocolError(PyklogError):
    """A JoinGroup's protocol type or protocols share nothing with the group's."""


@_wire(26, "INVALID_SESSION_TIMEOUT")
class InvalidSessionTimeoutError(PyklogError):
    """A JoinGroup's session timeout is outside group.min/max.session.timeout.ms."""


@_wire(27, "REBALANCE_IN_PROGRESS")
class RebalanceInProgressError(PyklogError):
    """The group is rebalancing: the member must rejoin."""


@_wire(79, "MEMBER_ID_REQUIRED")
class MemberIdRequiredError(PyklogError):
    """KIP-394: the first JoinGroup (v4+) of a member gets its member id and must rejoin with it."""


@_wire(81, "GROUP_MAX_SIZE_REACHED")
class GroupMaxSizeReachedError(PyklogError):
    """The group already has group.max.size members."""


@_wire(82, "FENCED_INSTANCE_ID")
class FencedInstanceIdError(PyklogError):
    """KIP-345: another member has joined with this group.instance.id; this one is a zombie."""


# ---------------------------------------------------------------------------- transactions (KIP-98)


@_wire(48, "INVALID_TXN_STATE")
class InvalidTxnStateError(PyklogError):
    """The request is not valid in the transaction's current state (e.g. EndTxn with no
    transaction, produce outside a begun transaction, a marker older than the open transaction)."""


@_wire(49, "INVALID_PRODUCER_ID_MAPPING")
class InvalidProducerIdMappingError(PyklogError):
    """The producer id is not the one the coordinator holds for this transactional id."""


@_wire(50, "INVALID_TRANSACTION_TIMEOUT")
class InvalidTransactionTimeoutError(PyklogError):
    """transaction.timeout.ms is <= 0 or above the broker's transaction.max.timeout.ms."""


@_wire(51, "CONCURRENT_TRANSACTIONS", retriable=True)
class ConcurrentTransactionsError(PyklogError):
    """The previous transaction of this transactional id is still being completed (its markers
    are being written): retry shortly."""


@_wire(52, "TRANSACTION_COORDINATOR_FENCED")
class TransactionCoordinatorFencedError(PyklogError):
    """A marker or request comes from a transaction coordinator with an older coordinator epoch
    than one already seen (a coordinator that lost its partition)."""


@_wire(90, "PRODUCER_FENCED")
class ProducerFencedError(PyklogError):
    """A newer producer with the same transactional id has initialised (a higher epoch): this one
    is a zombie and must close."""


@_wire(105, "TRANSACTIONAL_ID_NOT_FOUND")
class TransactionalIdNotFoundError(PyklogError):
    """The transactional id is not known to the coordinator."""


# ---------------------------------------------------------------------------- admin APIs (kafka-admin)


@_wire(44, "POLICY_VIOLATION")
class PolicyViolationError(PyklogError):
    """The request breaks a topic's policy (DeleteRecords on a topic whose cleanup.policy has no
    ``delete``)."""


@_wire(68, "NON_EMPTY_GROUP")
class NonEmptyGroupError(PyklogError):
    """DeleteGroups / OffsetDelete on a group that still has members."""


@_wire(69, "GROUP_ID_NOT_FOUND")
class GroupIdNotFoundError(PyklogError):
    """The group is not known to its coordinator (no members and no committed offsets)."""


@_wire(86, "GROUP_SUBSCRIBED_TO_TOPIC")
class GroupSubscribedToTopicError(PyklogError):
    """OffsetDelete of a partition whose topic a member of the (consumer) group subscribes to."""


@_wire(114, "MISMATCHED_ENDPOINT_TYPE")
class MismatchedEndpointTypeError(PyklogError):
    """DescribeCluster asked a broker for controller endpoints (KIP-919)."""


@_wire(115, "UNSUPPORTED_ENDPOINT_TYPE")
class UnsupportedEndpointTypeError(PyklogError):
    """DescribeCluster named an endpoint type Kafka does not know."""


# the controller (pyklog.broker.controller): ControlledShutdown, ElectLeaders, reassignments
@_wire(8, "BROKER_NOT_AVAILABLE")
class BrokerNotAvailableError(PyklogError):
    pass


@_wire(60, "REASSIGNMENT_IN_PROGRESS")
class ReassignmentInProgressError(PyklogError):
    pass


@_wire(77, "STALE_BROKER_EPOCH")
class StaleBrokerEpochError(PyklogError):
    pass


@_wire(80, "PREFERRED_LEADER_NOT_AVAILABLE", retriable=True)
class PreferredLeaderNotAvailableError(PyklogError):
    pass


@_wire(83, "ELIGIBLE_LEADERS_NOT_AVAILABLE")
class EligibleLeadersNotAvailableError(PyklogError):
    pass


@_wire(84, "ELECTION_NOT_NEEDED")
class ElectionNotNeededError(PyklogError):
    pass


@_wire(85, "NO_REASSIGNMENT_IN_PROGRESS")
class NoReassignmentInProgressError(PyklogError):
    pass


@_wire(58, "SASL_AUTHENTICATION_FAILED")
class SaslAuthenticationError(PyklogError):
    """Authentication failed (KIP-152): the message is the broker's, safe to show (no credential)."""


@_wire(91, "RESOURCE_NOT_FOUND")
class ResourceNotFoundError(PyklogError):
    pass


@_wire(92, "DUPLICATE_RESOURCE")
class DuplicateResourceError(PyklogError):
    pass


@_wire(93, "UNACCEPTABLE_CREDENTIAL")
class UnacceptableCredentialError(PyklogError):
    pass
