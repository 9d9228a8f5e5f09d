"""Kafka 3.7's broker settings as data: every name Kafka's ``KafkaConfig`` defines (ZooKeeper mode and
KRaft alike, as Kafka's generated broker configuration reference lists them), the three dynamic
quota settings of Kafka's ``DynamicConfig.Broker`` and the settings ``AclAuthorizer`` reads
(``super.users``, ``allow.everyone.if.no.acl.found``, ``authorizer.zookeeper.*``), with Kafka's type, default, importance, valid
values, documentation and dynamic update mode (``DynamicBrokerConfig``):

* ``read-only``: only in ``server.properties``, a restart applies a change;
* ``per-broker``: may be altered dynamically for one broker (``/config/brokers/<id>``);
* ``cluster-wide``: may be altered for one broker or as the cluster-wide default
  (``/config/brokers/<default>``).

Password-typed settings are sensitive: DescribeConfigs answers them with a null value and
``is_sensitive`` true, and a dynamic value is stored encoded with ``password.encoder.secret``.

Listener overrides: ``listener.name.<listener>.<setting>`` for the settings Kafka takes per listener
(:data:`PER_LISTENER_SETTINGS`: the ``ssl.*`` and ``sasl.*`` families, ``principal.builder.class``,
``connections.max.reauth.ms`` and the connection limits ``max.connections``,
``max.connection.creation.rate``, ``num.network.threads``); the SASL mechanism settings
(:data:`LISTENER_MECHANISM_SETTINGS`) are written ``listener.name.<listener>.<mechanism>.<setting>``
(``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config``).  Kafka's
``SslConfigs.RECONFIGURABLE_CONFIGS`` (keystores and truststores) can be altered dynamically only in
this per-listener form (:data:`LISTENER_ONLY_DYNAMIC_SETTINGS`).

What pyklog implements of each setting (typed parsing, live application) is
:mod:`pyklog.broker.server.config` and :mod:`pyklog.broker.server.dynamic_config`; every other name
here is accepted with no effect.  Pure data and pure functions; thread-safe.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class KafkaSetting(NamedTuple):
    """One broker setting as Kafka 3.7 defines it."""

    name: str
    type: str  # Kafka's ConfigDef.Type, lower case: boolean string int short long double list class password
    default: str | None  # Kafka's default as text; None: null (unset)
    update_mode: str  # "read-only", "per-broker" or "cluster-wide"
    importance: str  # "high", "medium" or "low"
    valid_values: str  # Kafka's description of the valid values ("" = any of the type)
    documentation: str

    @property
    def sensitive(self) -> bool:
        return self.type == "password"

    @property
    def dynamic(self) -> bool:
        return self.update_mode != "read-only"


# Taken from Kafka 3.7.1's generated broker configuration reference (kafka_config.html), sorted by name.
_SETTINGS: tuple[KafkaSetting, ...] = (
    KafkaSetting(
        "advertised.listeners",
        "string",
        None,
        "per-broker",
        "high",
        "",
        (
            "Listeners to publish to ZooKeeper for clients to use, if different than the listeners config "
            "property. In IaaS environments, this may need to be different from the interface to which the broker"
            " binds. If this is not set, the value for listeners will be used. Unlike listeners, it is not valid "
            "to advertise the 0.0.0.0 meta-address. Also unlike listeners, there can be duplicated ports in this "
            "property, so that one listener can be configured to advertise another listener's address. This can "
            "be useful in some cases where external load balancers are used."
        ),
    ),
    KafkaSetting(
        "alter.config.policy.class.name",
        "class",
        None,
        "read-only",
        "low",
        "",
        (
            "The alter configs policy class that should be used for validation. The class should implement the "
            "org.apache.kafka.server.policy.AlterConfigPolicy interface."
        ),
    ),
    KafkaSetting(
        "alter.log.dirs.replication.quota.window.num",
        "int",
        "11",
        "read-only",
        "low",
        "[1,...]",
        ("The number of samples to retain in memory for alter log dirs replication quotas"),
    ),
    KafkaSetting(
        "alter.log.dirs.replication.quota.window.size.seconds",
        "int",
        "1",
        "read-only",
        "low",
        "[1,...]",
        ("The time span of each sample for alter log dirs replication quotas"),
    ),
    KafkaSetting(
        "authorizer.class.name",
        "string",
        "",
        "read-only",
        "low",
        "non-null string",
        (
            "The fully qualified name of a class that implements org.apache.kafka.server.authorizer.Authorizer "
            "interface, which is used by the broker for authorization."
        ),
    ),
    KafkaSetting(
        "auto.create.topics.enable",
        "boolean",
        "true",
        "read-only",
        "high",
        "",
        ("Enable auto creation of topic on the server."),
    ),
    KafkaSetting(
        "auto.include.jmx.reporter",
        "boolean",
        "true",
        "read-only",
        "low",
        "",
        (
            "Deprecated. Whether to automatically include JmxReporter even if it's not listed in "
            "metric.reporters. This configuration will be removed in Kafka 4.0, users should instead include "
            "org.apache.kafka.common.metrics.JmxReporter in metric.reporters in order to enable the JmxReporter."
        ),
    ),
    KafkaSetting(
        "auto.leader.rebalance.enable",
        "boolean",
        "true",
        "read-only",
        "high",
        "",
        (
            "Enables auto leader balancing. A background thread checks the distribution of partition leaders at "
            "regular intervals, configurable by leader.imbalance.check.interval.seconds. If the leader imbalance "
            "exceeds leader.imbalance.per.broker.percentage, leader rebalance to the preferred leader for "
            "partitions is triggered."
        ),
    ),
    KafkaSetting(
        "background.threads",
        "int",
        "10",
        "cluster-wide",
        "high",
        "[1,...]",
        ("The number of threads to use for various background processing tasks"),
    ),
    KafkaSetting(
        "broker.heartbeat.interval.ms",
        "int",
        "2000",
        "read-only",
        "medium",
        "",
        ("The length of time in milliseconds between broker heartbeats. Used when running in KRaft mode."),
    ),
    KafkaSetting(
        "broker.id",
        "int",
        "-1",
        "read-only",
        "high",
        "",
        (
            "The broker id for this server. If unset, a unique broker id will be generated.To avoid conflicts "
            "between ZooKeeper generated broker id's and user configured broker id's, generated broker ids start "
            "from reserved.broker.max.id + 1."
        ),
    ),
    KafkaSetting(
        "broker.id.generation.enable",
        "boolean",
        "true",
        "read-only",
        "medium",
        "",
        (
            "Enable automatic broker id generation on the server. When enabled the value configured for "
            "reserved.broker.max.id should be reviewed."
        ),
    ),
    KafkaSetting(
        "broker.rack",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Rack of the broker. This will be used in rack aware replication assignment for fault tolerance. "
            "Examples: `RACK1`, `us-east-1d`"
        ),
    ),
    KafkaSetting(
        "broker.session.timeout.ms",
        "int",
        "9000",
        "read-only",
        "medium",
        "",
        (
            "The length of time in milliseconds that a broker lease lasts if no heartbeats are made. Used when "
            "running in KRaft mode."
        ),
    ),
    KafkaSetting(
        "client.quota.callback.class",
        "class",
        None,
        "read-only",
        "low",
        "",
        (
            "The fully qualified name of a class that implements the ClientQuotaCallback interface, which is used"
            " to determine quota limits applied to client requests. By default, the <user> and <client-id> quotas"
            " that are stored in ZooKeeper are applied. For any given request, the most specific quota that "
            "matches the user principal of the session and the client-id of the request is applied."
        ),
    ),
    KafkaSetting(
        "compression.type",
        "string",
        "producer",
        "cluster-wide",
        "high",
        "[uncompressed, zstd, lz4, snappy, gzip, producer]",
        (
            "Specify the final compression type for a given topic. This configuration accepts the standard "
            "compression codecs ('gzip', 'snappy', 'lz4', 'zstd'). It additionally accepts 'uncompressed' which "
            "is equivalent to no compression; and 'producer' which means retain the original compression codec "
            "set by the producer."
        ),
    ),
    KafkaSetting(
        "connection.failed.authentication.delay.ms",
        "int",
        "100",
        "read-only",
        "low",
        "[0,...]",
        (
            "Connection close delay on failed authentication: this is the time (in milliseconds) by which "
            "connection close will be delayed on authentication failure. This must be configured to be less than "
            "connections.max.idle.ms to prevent connection timeout."
        ),
    ),
    KafkaSetting(
        "connections.max.idle.ms",
        "long",
        "600000",
        "read-only",
        "medium",
        "",
        (
            "Idle connections timeout: the server socket processor threads close the connections that idle more "
            "than this"
        ),
    ),
    KafkaSetting(
        "connections.max.reauth.ms",
        "long",
        "0",
        "read-only",
        "medium",
        "",
        (
            "When explicitly set to a positive number (the default is 0, not a positive number), a session "
            "lifetime that will not exceed the configured value will be communicated to v2.2.0 or later clients "
            "when they authenticate. The broker will disconnect any such connection that is not re-authenticated "
            "within the session lifetime and that is then subsequently used for any purpose other than "
            "re-authentication. Configuration names can optionally be prefixed with listener prefix and SASL "
            "mechanism name in lower-case. For example, "
            "listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=3600000"
        ),
    ),
    KafkaSetting(
        "control.plane.listener.name",
        "string",
        None,
        "read-only",
        "high",
        "",
        (
            "Name of listener used for communication between controller and brokers. A broker will use the "
            "control.plane.listener.name to locate the endpoint in listeners list, to listen for connections from"
            " the controller. For example, if a broker's config is: listeners = INTERNAL://192.1.1.8:9092, "
            "EXTERNAL://10.1.1.5:9093, CONTROLLER://192.1.1.8:9094listener.security.protocol.map = "
            "INTERNAL:PLAINTEXT, EXTERNAL:SSL, CONTROLLER:SSLcontrol.plane.listener.name = CONTROLLER On startup,"
            ' the broker will start listening on "192.1.1.8:9094" with security protocol "SSL". On the controller'
            " side, when it discovers a broker's published endpoints through ZooKeeper, it will use the "
            "control.plane.listener.name to find the endpoint, which it will use to establish connection to the "
            'broker. For example, if the broker\'s published endpoints on ZooKeeper are: "endpoints" : ["INTERNAL:'
            '//broker1.example.com:9092","EXTERNAL://broker1.example.com:9093","CONTROLLER://broker1.example.com:'
            "9094\"] and the controller's config is: listener.security.protocol.map = INTERNAL:PLAINTEXT, "
            "EXTERNAL:SSL, CONTROLLER:SSLcontrol.plane.listener.name = CONTROLLER then the controller will use "
            '"broker1.example.com:9094" with security protocol "SSL" to connect to the broker. If not explicitly '
            "configured, the default value will be null and there will be no dedicated endpoints for controller "
            "connections. If explicitly configured, the value cannot be the same as the value of "
            "inter.broker.listener.name."
        ),
    ),
    KafkaSetting(
        "controlled.shutdown.enable",
        "boolean",
        "true",
        "read-only",
        "medium",
        "",
        ("Enable controlled shutdown of the server."),
    ),
    KafkaSetting(
        "controlled.shutdown.max.retries",
        "int",
        "3",
        "read-only",
        "medium",
        "",
        (
            "Controlled shutdown can fail for multiple reasons. This determines the number of retries when such "
            "failure happens"
        ),
    ),
    KafkaSetting(
        "controlled.shutdown.retry.backoff.ms",
        "long",
        "5000",
        "read-only",
        "medium",
        "",
        (
            "Before each retry, the system needs time to recover from the state that caused the previous failure "
            "(Controller fail over, replica lag etc). This config determines the amount of time to wait before "
            "retrying."
        ),
    ),
    KafkaSetting(
        "controller.listener.names",
        "string",
        None,
        "read-only",
        "high",
        "",
        (
            "A comma-separated list of the names of the listeners used by the controller. This is required if "
            "running in KRaft mode. When communicating with the controller quorum, the broker will always use the"
            " first listener in this list. Note: The ZooKeeper-based controller should not set this "
            "configuration."
        ),
    ),
    KafkaSetting(
        "controller.quorum.append.linger.ms",
        "int",
        "25",
        "read-only",
        "medium",
        "",
        (
            "The duration in milliseconds that the leader will wait for writes to accumulate before flushing them"
            " to disk."
        ),
    ),
    KafkaSetting(
        "controller.quorum.election.backoff.max.ms",
        "int",
        "1000",
        "read-only",
        "high",
        "",
        (
            "Maximum time in milliseconds before starting new elections. This is used in the binary exponential "
            "backoff mechanism that helps prevent gridlocked elections"
        ),
    ),
    KafkaSetting(
        "controller.quorum.election.timeout.ms",
        "int",
        "1000",
        "read-only",
        "high",
        "",
        (
            "Maximum time in milliseconds to wait without being able to fetch from the leader before triggering a"
            " new election"
        ),
    ),
    KafkaSetting(
        "controller.quorum.fetch.timeout.ms",
        "int",
        "2000",
        "read-only",
        "high",
        "",
        (
            "Maximum time without a successful fetch from the current leader before becoming a candidate and "
            "triggering an election for voters; Maximum time a leader can go without receiving valid fetch or "
            "fetchSnapshot request from a majority of the quorum before resigning."
        ),
    ),
    KafkaSetting(
        "controller.quorum.request.timeout.ms",
        "int",
        "2000",
        "read-only",
        "medium",
        "",
        (
            "The configuration controls the maximum amount of time the client will wait for the response of a "
            "request. If the response is not received before the timeout elapses the client will resend the "
            "request if necessary or fail the request if retries are exhausted."
        ),
    ),
    KafkaSetting(
        "controller.quorum.retry.backoff.ms",
        "int",
        "20",
        "read-only",
        "low",
        "",
        (
            "The amount of time to wait before attempting to retry a failed request to a given topic partition. "
            "This avoids repeatedly sending requests in a tight loop under some failure scenarios. This value is "
            "the initial backoff value and will increase exponentially for each failed request, up to the "
            "retry.backoff.max.ms value."
        ),
    ),
    KafkaSetting(
        "controller.quorum.voters",
        "list",
        "",
        "read-only",
        "high",
        "non-empty list",
        (
            "Map of id/endpoint information for the set of voters in a comma-separated list of {id}@{host}:{port}"
            " entries. For example: 1@localhost:9092,2@localhost:9093,3@localhost:9094"
        ),
    ),
    KafkaSetting(
        "controller.quota.window.num",
        "int",
        "11",
        "read-only",
        "low",
        "[1,...]",
        ("The number of samples to retain in memory for controller mutation quotas"),
    ),
    KafkaSetting(
        "controller.quota.window.size.seconds",
        "int",
        "1",
        "read-only",
        "low",
        "[1,...]",
        ("The time span of each sample for controller mutations quotas"),
    ),
    KafkaSetting(
        "controller.socket.timeout.ms",
        "int",
        "30000",
        "read-only",
        "medium",
        "",
        ("The socket timeout for controller-to-broker channels."),
    ),
    KafkaSetting(
        "create.topic.policy.class.name",
        "class",
        None,
        "read-only",
        "low",
        "",
        (
            "The create topic policy class that should be used for validation. The class should implement the "
            "org.apache.kafka.server.policy.CreateTopicPolicy interface."
        ),
    ),
    KafkaSetting(
        "default.replication.factor",
        "int",
        "1",
        "read-only",
        "medium",
        "",
        ("The default replication factors for automatically created topics."),
    ),
    KafkaSetting(
        "delegation.token.expiry.check.interval.ms",
        "long",
        "3600000",
        "read-only",
        "low",
        "[1,...]",
        ("Scan interval to remove expired delegation tokens."),
    ),
    KafkaSetting(
        "delegation.token.expiry.time.ms",
        "long",
        "86400000",
        "read-only",
        "medium",
        "[1,...]",
        ("The token validity time in milliseconds before the token needs to be renewed. Default value 1 day."),
    ),
    KafkaSetting(
        "delegation.token.master.key",
        "password",
        None,
        "read-only",
        "medium",
        "",
        ("DEPRECATED: An alias for delegation.token.secret.key, which should be used instead of this config."),
    ),
    KafkaSetting(
        "delegation.token.max.lifetime.ms",
        "long",
        "604800000",
        "read-only",
        "medium",
        "[1,...]",
        ("The token has a maximum lifetime beyond which it cannot be renewed anymore. Default value 7 days."),
    ),
    KafkaSetting(
        "delegation.token.secret.key",
        "password",
        None,
        "read-only",
        "medium",
        "",
        (
            "Secret key to generate and verify delegation tokens. The same key must be configured across all the "
            "brokers. If using Kafka with KRaft, the key must also be set across all controllers. If the key is "
            "not set or set to empty string, brokers will disable the delegation token support."
        ),
    ),
    KafkaSetting(
        "delete.records.purgatory.purge.interval.requests",
        "int",
        "1",
        "read-only",
        "medium",
        "",
        ("The purge interval (in number of requests) of the delete records request purgatory"),
    ),
    KafkaSetting(
        "delete.topic.enable",
        "boolean",
        "true",
        "read-only",
        "high",
        "",
        ("Enables delete topic. Delete topic through the admin tool will have no effect if this config is turned off"),
    ),
    KafkaSetting(
        "early.start.listeners",
        "string",
        None,
        "read-only",
        "high",
        "",
        (
            "A comma-separated list of listener names which may be started before the authorizer has finished "
            "initialization. This is useful when the authorizer is dependent on the cluster itself for "
            "bootstrapping, as is the case for the StandardAuthorizer (which stores ACLs in the metadata log.) By"
            " default, all listeners included in controller.listener.names will also be early start listeners. A "
            "listener should not appear in this list if it accepts external traffic."
        ),
    ),
    KafkaSetting(
        "eligible.leader.replicas.enable",
        "boolean",
        "false",
        "read-only",
        "high",
        "",
        ("Enable the Eligible leader replicas"),
    ),
    KafkaSetting(
        "fetch.max.bytes",
        "int",
        "57671680",
        "read-only",
        "medium",
        "[1024,...]",
        ("The maximum number of bytes we will return for a fetch request. Must be at least 1024."),
    ),
    KafkaSetting(
        "fetch.purgatory.purge.interval.requests",
        "int",
        "1000",
        "read-only",
        "medium",
        "",
        ("The purge interval (in number of requests) of the fetch request purgatory"),
    ),
    KafkaSetting(
        "follower.replication.throttled.rate",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "A long representing the upper bound (bytes/sec) on replication traffic for followers enumerated in "
            "the property follower.replication.throttled.replicas (for each topic). This property can be only set"
            " dynamically. It is suggested that the limit be kept above 1MB/s for accurate behaviour."
        ),
    ),
    KafkaSetting(
        "group.consumer.assignors",
        "list",
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        "read-only",
        "medium",
        "",
        (
            "The server side assignors as a list of full class names. The first one in the list is considered as "
            "the default assignor to be used in the case where the consumer does not specify an assignor."
        ),
    ),
    KafkaSetting(
        "group.consumer.heartbeat.interval.ms",
        "int",
        "5000",
        "read-only",
        "medium",
        "[1,...]",
        ("The heartbeat interval given to the members of a consumer group."),
    ),
    KafkaSetting(
        "group.consumer.max.heartbeat.interval.ms",
        "int",
        "15000",
        "read-only",
        "medium",
        "[1,...]",
        ("The maximum heartbeat interval for registered consumers."),
    ),
    KafkaSetting(
        "group.consumer.max.session.timeout.ms",
        "int",
        "60000",
        "read-only",
        "medium",
        "[1,...]",
        ("The maximum allowed session timeout for registered consumers."),
    ),
    KafkaSetting(
        "group.consumer.max.size",
        "int",
        "2147483647",
        "read-only",
        "medium",
        "[1,...]",
        ("The maximum number of consumers that a single consumer group can accommodate."),
    ),
    KafkaSetting(
        "group.consumer.min.heartbeat.interval.ms",
        "int",
        "5000",
        "read-only",
        "medium",
        "[1,...]",
        ("The minimum heartbeat interval for registered consumers."),
    ),
    KafkaSetting(
        "group.consumer.min.session.timeout.ms",
        "int",
        "45000",
        "read-only",
        "medium",
        "[1,...]",
        ("The minimum allowed session timeout for registered consumers."),
    ),
    KafkaSetting(
        "group.consumer.session.timeout.ms",
        "int",
        "45000",
        "read-only",
        "medium",
        "[1,...]",
        ("The timeout to detect client failures when using the consumer group protocol."),
    ),
    KafkaSetting(
        "group.coordinator.rebalance.protocols",
        "list",
        "classic",
        "read-only",
        "medium",
        "[consumer, classic]",
        (
            "The list of enabled rebalance protocols. Supported protocols: consumer,classic. The consumer "
            "rebalance protocol is in early access and therefore must not be used in production."
        ),
    ),
    KafkaSetting(
        "group.coordinator.threads",
        "int",
        "1",
        "read-only",
        "medium",
        "[1,...]",
        ("The number of threads used by the group coordinator."),
    ),
    KafkaSetting(
        "group.initial.rebalance.delay.ms",
        "int",
        "3000",
        "read-only",
        "medium",
        "",
        (
            "The amount of time the group coordinator will wait for more consumers to join a new group before "
            "performing the first rebalance. A longer delay means potentially fewer rebalances, but increases the"
            " time until processing begins."
        ),
    ),
    KafkaSetting(
        "group.max.session.timeout.ms",
        "int",
        "1800000",
        "read-only",
        "medium",
        "",
        (
            "The maximum allowed session timeout for registered consumers. Longer timeouts give consumers more "
            "time to process messages in between heartbeats at the cost of a longer time to detect failures."
        ),
    ),
    KafkaSetting(
        "group.max.size",
        "int",
        "2147483647",
        "read-only",
        "medium",
        "[1,...]",
        ("The maximum number of consumers that a single consumer group can accommodate."),
    ),
    KafkaSetting(
        "group.min.session.timeout.ms",
        "int",
        "6000",
        "read-only",
        "medium",
        "",
        (
            "The minimum allowed session timeout for registered consumers. Shorter timeouts result in quicker "
            "failure detection at the cost of more frequent consumer heartbeating, which can overwhelm broker "
            "resources."
        ),
    ),
    KafkaSetting(
        "initial.broker.registration.timeout.ms",
        "int",
        "60000",
        "read-only",
        "medium",
        "",
        (
            "When initially registering with the controller quorum, the number of milliseconds to wait before "
            "declaring failure and exiting the broker process."
        ),
    ),
    KafkaSetting(
        "inter.broker.listener.name",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Name of listener used for communication between brokers. If this is unset, the listener name is "
            "defined by security.inter.broker.protocol. It is an error to set this and "
            "security.inter.broker.protocol properties at the same time."
        ),
    ),
    KafkaSetting(
        "inter.broker.protocol.version",
        "string",
        "3.7-IV4",
        "read-only",
        "medium",
        "[0.8.0, 0.8.1, 0.8.2, 0.9.0, 0.10.0-IV0, 0.10.0-IV1, 0.10.1-IV0, 0.10.1-IV1, 0.10.1-IV2, 0.10.2-IV0, 0.11.0-IV0, 0.11.0-IV1, 0.11.0-IV2, 1.0-IV0, 1.1-IV0, 2.0-IV0, 2.0-IV1, 2.1-IV0, 2.1-IV1, 2.1-IV2, 2.2-IV0, 2.2-IV1, 2.3-IV0, 2.3-IV1, 2.4-IV0, 2.4-IV1, 2.5-IV0, 2.6-IV0, 2.7-IV0, 2.7-IV1, 2.7-IV2, 2.8-IV0, 2.8-IV1, 3.0-IV0, 3.0-IV1, 3.1-IV0, 3.2-IV0, 3.3-IV0, 3.3-IV1, 3.3-IV2, 3.3-IV3, 3.4-IV0, 3.5-IV0, 3.5-IV1, 3.5-IV2, 3.6-IV0, 3.6-IV1, 3.6-IV2, 3.7-IV0, 3.7-IV1, 3.7-IV2, 3.7-IV3, 3.7-IV4, 3.8-IV0]",
        (
            "Specify which version of the inter-broker protocol will be used. This is typically bumped after all "
            "brokers were upgraded to a new version. Example of some valid values are: 0.8.0, 0.8.1, 0.8.1.1, "
            "0.8.2, 0.8.2.0, 0.8.2.1, 0.9.0.0, 0.9.0.1 Check MetadataVersion for the full list. This "
            "configuration is only applicable in Zookeeper mode."
        ),
    ),
    KafkaSetting(
        "kafka.metrics.polling.interval.secs",
        "int",
        "10",
        "read-only",
        "low",
        "[1,...]",
        ("The metrics polling interval (in seconds) which can be used in kafka.metrics.reporters implementations."),
    ),
    KafkaSetting(
        "kafka.metrics.reporters",
        "list",
        "",
        "read-only",
        "low",
        "",
        (
            "A list of classes to use as Yammer metrics custom reporters. The reporters should implement "
            "kafka.metrics.KafkaMetricsReporter trait. If a client wants to expose JMX operations on a custom "
            "reporter, the custom reporter needs to additionally implement an MBean trait that extends "
            "kafka.metrics.KafkaMetricsReporterMBean trait so that the registered MBean is compliant with the "
            "standard MBean convention."
        ),
    ),
    KafkaSetting(
        "leader.imbalance.check.interval.seconds",
        "long",
        "300",
        "read-only",
        "high",
        "[1,...]",
        ("The frequency with which the partition rebalance check is triggered by the controller"),
    ),
    KafkaSetting(
        "leader.imbalance.per.broker.percentage",
        "int",
        "10",
        "read-only",
        "high",
        "",
        (
            "The ratio of leader imbalance allowed per broker. The controller would trigger a leader balance if "
            "it goes above this value per broker. The value is specified in percentage."
        ),
    ),
    KafkaSetting(
        "leader.replication.throttled.rate",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "A long representing the upper bound (bytes/sec) on replication traffic for leaders enumerated in the"
            " property leader.replication.throttled.replicas (for each topic). This property can be only set "
            "dynamically. It is suggested that the limit be kept above 1MB/s for accurate behaviour."
        ),
    ),
    KafkaSetting(
        "listener.security.protocol.map",
        "string",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "per-broker",
        "low",
        "",
        (
            "Map between listener names and security protocols. This must be defined for the same security "
            "protocol to be usable in more than one port or IP. For example, internal and external traffic can be"
            " separated even if SSL is required for both. Concretely, the user could define listeners with names "
            "INTERNAL and EXTERNAL and this property as: `INTERNAL:SSL,EXTERNAL:SSL`. As shown, key and value are"
            " separated by a colon and map entries are separated by commas. Each listener name should only appear"
            " once in the map. Different security (SSL and SASL) settings can be configured for each listener by "
            "adding a normalised prefix (the listener name is lowercased) to the config name. For example, to set"
            " a different keystore for the INTERNAL listener, a config with name "
            "listener.name.internal.ssl.keystore.location would be set. If the config for the listener name is "
            "not set, the config will fallback to the generic config (i.e. ssl.keystore.location). Note that in "
            "KRaft a default mapping from the listener names defined by controller.listener.names to PLAINTEXT is"
            " assumed if no explicit mapping is provided and no other security protocol is in use."
        ),
    ),
    KafkaSetting(
        "listeners",
        "string",
        "PLAINTEXT://:9092",
        "per-broker",
        "high",
        "",
        (
            "Listener List - Comma-separated list of URIs we will listen on and the listener names. If the "
            "listener name is not a security protocol, listener.security.protocol.map must also be set. Listener "
            "names and port numbers must be unique unless one listener is an IPv4 address and the other listener "
            "is an IPv6 address (for the same port). Specify hostname as 0.0.0.0 to bind to all interfaces. Leave"
            " hostname empty to bind to default interface. Examples of legal listener lists: "
            "PLAINTEXT://myhost:9092,SSL://:9091 CLIENT://0.0.0.0:9092,REPLICATION://localhost:9093 "
            "PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092"
        ),
    ),
    KafkaSetting(
        "log.cleaner.backoff.ms",
        "long",
        "15000",
        "cluster-wide",
        "medium",
        "[0,...]",
        ("The amount of time to sleep when there are no logs to clean"),
    ),
    KafkaSetting(
        "log.cleaner.dedupe.buffer.size",
        "long",
        "134217728",
        "cluster-wide",
        "medium",
        "",
        ("The total memory used for log deduplication across all cleaner threads"),
    ),
    KafkaSetting(
        "log.cleaner.delete.retention.ms",
        "long",
        "86400000",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "The amount of time to retain tombstone message markers for log compacted topics. This setting also "
            "gives a bound on the time in which a consumer must complete a read if they begin from offset 0 to "
            "ensure that they get a valid snapshot of the final stage (otherwise tombstones messages may be "
            "collected before a consumer completes their scan)."
        ),
    ),
    KafkaSetting(
        "log.cleaner.enable",
        "boolean",
        "true",
        "read-only",
        "medium",
        "",
        (
            "Enable the log cleaner process to run on the server. Should be enabled if using any topics with a "
            "cleanup.policy=compact including the internal offsets topic. If disabled those topics will not be "
            "compacted and continually grow in size."
        ),
    ),
    KafkaSetting(
        "log.cleaner.io.buffer.load.factor",
        "double",
        "0.9",
        "cluster-wide",
        "medium",
        "",
        (
            "Log cleaner dedupe buffer load factor. The percentage full the dedupe buffer can become. A higher "
            "value will allow more log to be cleaned at once but will lead to more hash collisions"
        ),
    ),
    KafkaSetting(
        "log.cleaner.io.buffer.size",
        "int",
        "524288",
        "cluster-wide",
        "medium",
        "[0,...]",
        ("The total memory used for log cleaner I/O buffers across all cleaner threads"),
    ),
    KafkaSetting(
        "log.cleaner.io.max.bytes.per.second",
        "double",
        "1.7976931348623157E308",
        "cluster-wide",
        "medium",
        "",
        (
            "The log cleaner will be throttled so that the sum of its read and write i/o will be less than this "
            "value on average"
        ),
    ),
    KafkaSetting(
        "log.cleaner.max.compaction.lag.ms",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[1,...]",
        (
            "The maximum time a message will remain ineligible for compaction in the log. Only applicable for "
            "logs that are being compacted."
        ),
    ),
    KafkaSetting(
        "log.cleaner.min.cleanable.ratio",
        "double",
        "0.5",
        "cluster-wide",
        "medium",
        "[0,...,1]",
        (
            "The minimum ratio of dirty log to total log for a log to eligible for cleaning. If the "
            "log.cleaner.max.compaction.lag.ms or the log.cleaner.min.compaction.lag.ms configurations are also "
            "specified, then the log compactor considers the log eligible for compaction as soon as either: (i) "
            "the dirty ratio threshold has been met and the log has had dirty (uncompacted) records for at least "
            "the log.cleaner.min.compaction.lag.ms duration, or (ii) if the log has had dirty (uncompacted) "
            "records for at most the log.cleaner.max.compaction.lag.ms period."
        ),
    ),
    KafkaSetting(
        "log.cleaner.min.compaction.lag.ms",
        "long",
        "0",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "The minimum time a message will remain uncompacted in the log. Only applicable for logs that are "
            "being compacted."
        ),
    ),
    KafkaSetting(
        "log.cleaner.threads",
        "int",
        "1",
        "cluster-wide",
        "medium",
        "[0,...]",
        ("The number of background threads to use for log cleaning"),
    ),
    KafkaSetting(
        "log.cleanup.policy",
        "list",
        "delete",
        "cluster-wide",
        "medium",
        "[compact, delete]",
        (
            "The default cleanup policy for segments beyond the retention window. A comma separated list of valid"
            ' policies. Valid policies are: "delete" and "compact"'
        ),
    ),
    KafkaSetting(
        "log.dir",
        "string",
        "/tmp/kafka-logs",
        "read-only",
        "high",
        "",
        ("The directory in which the log data is kept (supplemental for log.dirs property)"),
    ),
    KafkaSetting(
        "log.dirs",
        "string",
        None,
        "read-only",
        "high",
        "",
        (
            "A comma-separated list of the directories where the log data is stored. If not set, the value in "
            "log.dir is used."
        ),
    ),
    KafkaSetting(
        "log.flush.interval.messages",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "high",
        "[1,...]",
        ("The number of messages accumulated on a log partition before messages are flushed to disk."),
    ),
    KafkaSetting(
        "log.flush.interval.ms",
        "long",
        None,
        "cluster-wide",
        "high",
        "",
        (
            "The maximum time in ms that a message in any topic is kept in memory before flushed to disk. If not "
            "set, the value in log.flush.scheduler.interval.ms is used"
        ),
    ),
    KafkaSetting(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        "60000",
        "read-only",
        "high",
        "[0,...]",
        (
            "The frequency with which we update the persistent record of the last flush which acts as the log "
            "recovery point."
        ),
    ),
    KafkaSetting(
        "log.flush.scheduler.interval.ms",
        "long",
        "9223372036854775807",
        "read-only",
        "high",
        "",
        ("The frequency in ms that the log flusher checks whether any log needs to be flushed to disk"),
    ),
    KafkaSetting(
        "log.flush.start.offset.checkpoint.interval.ms",
        "int",
        "60000",
        "read-only",
        "high",
        "[0,...]",
        ("The frequency with which we update the persistent record of log start offset"),
    ),
    KafkaSetting(
        "log.index.interval.bytes",
        "int",
        "4096",
        "cluster-wide",
        "medium",
        "[0,...]",
        ("The interval with which we add an entry to the offset index."),
    ),
    KafkaSetting(
        "log.index.size.max.bytes",
        "int",
        "10485760",
        "cluster-wide",
        "medium",
        "[4,...]",
        ("The maximum size in bytes of the offset index"),
    ),
    KafkaSetting(
        "log.local.retention.bytes",
        "long",
        "-2",
        "cluster-wide",
        "medium",
        "[-2,...]",
        (
            "The maximum size of local log segments that can grow for a partition before it gets eligible for "
            "deletion. Default value is -2, it represents `log.retention.bytes` value to be used. The effective "
            "value should always be less than or equal to `log.retention.bytes` value."
        ),
    ),
    KafkaSetting(
        "log.local.retention.ms",
        "long",
        "-2",
        "cluster-wide",
        "medium",
        "[-2,...]",
        (
            "The number of milliseconds to keep the local log segments before it gets eligible for deletion. "
            "Default value is -2, it represents `log.retention.ms` value is to be used. The effective value "
            "should always be less than or equal to `log.retention.ms` value."
        ),
    ),
    KafkaSetting(
        "log.message.downconversion.enable",
        "boolean",
        "true",
        "cluster-wide",
        "low",
        "",
        (
            "This configuration controls whether down-conversion of message formats is enabled to satisfy consume"
            " requests. When set to false, broker will not perform down-conversion for consumers expecting an "
            "older message format. The broker responds with UNSUPPORTED_VERSION error for consume requests from "
            "such older clients. This configurationdoes not apply to any message format conversion that might be "
            "required for replication to followers."
        ),
    ),
    KafkaSetting(
        "log.message.format.version",
        "string",
        "3.0-IV1",
        "read-only",
        "medium",
        "[0.8.0, 0.8.1, 0.8.2, 0.9.0, 0.10.0-IV0, 0.10.0-IV1, 0.10.1-IV0, 0.10.1-IV1, 0.10.1-IV2, 0.10.2-IV0, 0.11.0-IV0, 0.11.0-IV1, 0.11.0-IV2, 1.0-IV0, 1.1-IV0, 2.0-IV0, 2.0-IV1, 2.1-IV0, 2.1-IV1, 2.1-IV2, 2.2-IV0, 2.2-IV1, 2.3-IV0, 2.3-IV1, 2.4-IV0, 2.4-IV1, 2.5-IV0, 2.6-IV0, 2.7-IV0, 2.7-IV1, 2.7-IV2, 2.8-IV0, 2.8-IV1, 3.0-IV0, 3.0-IV1, 3.1-IV0, 3.2-IV0, 3.3-IV0, 3.3-IV1, 3.3-IV2, 3.3-IV3, 3.4-IV0, 3.5-IV0, 3.5-IV1, 3.5-IV2, 3.6-IV0, 3.6-IV1, 3.6-IV2, 3.7-IV0, 3.7-IV1, 3.7-IV2, 3.7-IV3, 3.7-IV4, 3.8-IV0]",
        (
            "Specify the message format version the broker will use to append messages to the logs. The value "
            "should be a valid MetadataVersion. Some examples are: 0.8.2, 0.9.0.0, 0.10.0, check MetadataVersion "
            "for more details. By setting a particular message format version, the user is certifying that all "
            "the existing messages on disk are smaller or equal than the specified version. Setting this value "
            "incorrectly will cause consumers with older versions to break as they will receive messages with a "
            "format that they don't understand."
        ),
    ),
    KafkaSetting(
        "log.message.timestamp.after.max.ms",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "This configuration sets the allowable timestamp difference between the message timestamp and the "
            "broker's timestamp. The message timestamp can be later than or equal to the broker's timestamp, with"
            " the maximum allowable difference determined by the value set in this configuration. If "
            "log.message.timestamp.type=CreateTime, the message will be rejected if the difference in timestamps "
            "exceeds this specified threshold. This configuration is ignored if "
            "log.message.timestamp.type=LogAppendTime."
        ),
    ),
    KafkaSetting(
        "log.message.timestamp.before.max.ms",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "This configuration sets the allowable timestamp difference between the broker's timestamp and the "
            "message timestamp. The message timestamp can be earlier than or equal to the broker's timestamp, "
            "with the maximum allowable difference determined by the value set in this configuration. If "
            "log.message.timestamp.type=CreateTime, the message will be rejected if the difference in timestamps "
            "exceeds this specified threshold. This configuration is ignored if "
            "log.message.timestamp.type=LogAppendTime."
        ),
    ),
    KafkaSetting(
        "log.message.timestamp.difference.max.ms",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "[DEPRECATED] The maximum difference allowed between the timestamp when a broker receives a message "
            "and the timestamp specified in the message. If log.message.timestamp.type=CreateTime, a message will"
            " be rejected if the difference in timestamp exceeds this threshold. This configuration is ignored if"
            " log.message.timestamp.type=LogAppendTime.The maximum timestamp difference allowed should be no "
            "greater than log.retention.ms to avoid unnecessarily frequent log rolling."
        ),
    ),
    KafkaSetting(
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        "cluster-wide",
        "medium",
        "[CreateTime, LogAppendTime]",
        (
            "Define whether the timestamp in the message is message create time or log append time. The value "
            "should be either `CreateTime` or `LogAppendTime`."
        ),
    ),
    KafkaSetting(
        "log.preallocate",
        "boolean",
        "false",
        "cluster-wide",
        "medium",
        "",
        (
            "Should pre allocate file when create new segment? If you are using Kafka on Windows, you probably "
            "need to set it to true."
        ),
    ),
    KafkaSetting(
        "log.retention.bytes",
        "long",
        "-1",
        "cluster-wide",
        "high",
        "",
        ("The maximum size of the log before deleting it"),
    ),
    KafkaSetting(
        "log.retention.check.interval.ms",
        "long",
        "300000",
        "read-only",
        "medium",
        "[1,...]",
        ("The frequency in milliseconds that the log cleaner checks whether any log is eligible for deletion"),
    ),
    KafkaSetting(
        "log.retention.hours",
        "int",
        "168",
        "read-only",
        "high",
        "",
        ("The number of hours to keep a log file before deleting it (in hours), tertiary to log.retention.ms property"),
    ),
    KafkaSetting(
        "log.retention.minutes",
        "int",
        None,
        "read-only",
        "high",
        "",
        (
            "The number of minutes to keep a log file before deleting it (in minutes), secondary to "
            "log.retention.ms property. If not set, the value in log.retention.hours is used"
        ),
    ),
    KafkaSetting(
        "log.retention.ms",
        "long",
        None,
        "cluster-wide",
        "high",
        "",
        (
            "The number of milliseconds to keep a log file before deleting it (in milliseconds), If not set, the "
            "value in log.retention.minutes is used. If set to -1, no time limit is applied."
        ),
    ),
    KafkaSetting(
        "log.roll.hours",
        "int",
        "168",
        "read-only",
        "high",
        "[1,...]",
        ("The maximum time before a new log segment is rolled out (in hours), secondary to log.roll.ms property"),
    ),
    KafkaSetting(
        "log.roll.jitter.hours",
        "int",
        "0",
        "read-only",
        "high",
        "[0,...]",
        ("The maximum jitter to subtract from logRollTimeMillis (in hours), secondary to log.roll.jitter.ms property"),
    ),
    KafkaSetting(
        "log.roll.jitter.ms",
        "long",
        None,
        "cluster-wide",
        "high",
        "",
        (
            "The maximum jitter to subtract from logRollTimeMillis (in milliseconds). If not set, the value in "
            "log.roll.jitter.hours is used"
        ),
    ),
    KafkaSetting(
        "log.roll.ms",
        "long",
        None,
        "cluster-wide",
        "high",
        "",
        (
            "The maximum time before a new log segment is rolled out (in milliseconds). If not set, the value in "
            "log.roll.hours is used"
        ),
    ),
    KafkaSetting(
        "log.segment.bytes",
        "int",
        "1073741824",
        "cluster-wide",
        "high",
        "[14,...]",
        ("The maximum size of a single log file"),
    ),
    KafkaSetting(
        "log.segment.delete.delay.ms",
        "long",
        "60000",
        "cluster-wide",
        "high",
        "[0,...]",
        ("The amount of time to wait before deleting a file from the filesystem"),
    ),
    KafkaSetting(
        "max.connection.creation.rate",
        "int",
        "2147483647",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "The maximum connection creation rate we allow in the broker at any time. Listener-level limits may "
            "also be configured by prefixing the config name with the listener prefix, for example, "
            "listener.name.internal.max.connection.creation.rate.Broker-wide connection rate limit should be "
            "configured based on broker capacity while listener limits should be configured based on application "
            "requirements. New connections will be throttled if either the listener or the broker limit is "
            "reached, with the exception of inter-broker listener. Connections on the inter-broker listener will "
            "be throttled only when the listener-level rate limit is reached."
        ),
    ),
    KafkaSetting(
        "max.connections",
        "int",
        "2147483647",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "The maximum number of connections we allow in the broker at any time. This limit is applied in "
            "addition to any per-ip limits configured using max.connections.per.ip. Listener-level limits may "
            "also be configured by prefixing the config name with the listener prefix, for example, "
            "listener.name.internal.max.connections. Broker-wide limit should be configured based on broker "
            "capacity while listener limits should be configured based on application requirements. New "
            "connections are blocked if either the listener or broker limit is reached. Connections on the "
            "inter-broker listener are permitted even if broker-wide limit is reached. The least recently used "
            "connection on another listener will be closed in this case."
        ),
    ),
    KafkaSetting(
        "max.connections.per.ip",
        "int",
        "2147483647",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "The maximum number of connections we allow from each ip address. This can be set to 0 if there are "
            "overrides configured using max.connections.per.ip.overrides property. New connections from the ip "
            "address are dropped if the limit is reached."
        ),
    ),
    KafkaSetting(
        "max.connections.per.ip.overrides",
        "string",
        "",
        "cluster-wide",
        "medium",
        "",
        (
            "A comma-separated list of per-ip or hostname overrides to the default maximum number of connections."
            ' An example value is "hostName:100,127.0.0.1:200"'
        ),
    ),
    KafkaSetting(
        "max.incremental.fetch.session.cache.slots",
        "int",
        "1000",
        "read-only",
        "medium",
        "[0,...]",
        ("The maximum number of incremental fetch sessions that we will maintain."),
    ),
    KafkaSetting(
        "message.max.bytes",
        "int",
        "1048588",
        "cluster-wide",
        "high",
        "[0,...]",
        (
            "The largest record batch size allowed by Kafka (after compression if compression is enabled). If "
            "this is increased and there are consumers older than 0.10.2, the consumers' fetch size must also be "
            "increased so that they can fetch record batches this large. In the latest message format version, "
            "records are always grouped into batches for efficiency. In previous message format versions, "
            "uncompressed records are not grouped into batches and this limit only applies to a single record in "
            "that case.This can be set per topic with the topic level max.message.bytes config."
        ),
    ),
    KafkaSetting(
        "metadata.log.dir",
        "string",
        None,
        "read-only",
        "high",
        "",
        (
            "This configuration determines where we put the metadata log for clusters in KRaft mode. If it is not"
            " set, the metadata log is placed in the first log directory from log.dirs."
        ),
    ),
    KafkaSetting(
        "metadata.log.max.record.bytes.between.snapshots",
        "long",
        "20971520",
        "read-only",
        "high",
        "[1,...]",
        (
            "This is the maximum number of bytes in the log between the latest snapshot and the high-watermark "
            "needed before generating a new snapshot. The default value is 20971520. To generate snapshots based "
            "on the time elapsed, see the metadata.log.max.snapshot.interval.ms configuration. The Kafka node "
            "will generate a snapshot when either the maximum time interval is reached or the maximum bytes limit"
            " is reached."
        ),
    ),
    KafkaSetting(
        "metadata.log.max.snapshot.interval.ms",
        "long",
        "3600000",
        "read-only",
        "high",
        "[0,...]",
        (
            "This is the maximum number of milliseconds to wait to generate a snapshot if there are committed "
            "records in the log that are not included in the latest snapshot. A value of zero disables time based"
            " snapshot generation. The default value is 3600000. To generate snapshots based on the number of "
            "metadata bytes, see the metadata.log.max.record.bytes.between.snapshots configuration. The Kafka "
            "node will generate a snapshot when either the maximum time interval is reached or the maximum bytes "
            "limit is reached."
        ),
    ),
    KafkaSetting(
        "metadata.log.segment.bytes",
        "int",
        "1073741824",
        "read-only",
        "high",
        "[12,...]",
        ("The maximum size of a single metadata log file."),
    ),
    KafkaSetting(
        "metadata.log.segment.ms",
        "long",
        "604800000",
        "read-only",
        "high",
        "",
        ("The maximum time before a new metadata log file is rolled out (in milliseconds)."),
    ),
    KafkaSetting(
        "metadata.max.idle.interval.ms",
        "int",
        "500",
        "read-only",
        "low",
        "[0,...]",
        (
            "This configuration controls how often the active controller should write no-op records to the "
            "metadata partition. If the value is 0, no-op records are not appended to the metadata partition. The"
            " default value is 500"
        ),
    ),
    KafkaSetting(
        "metadata.max.retention.bytes",
        "long",
        "104857600",
        "read-only",
        "high",
        "",
        (
            "The maximum combined size of the metadata log and snapshots before deleting old snapshots and log "
            "files. Since at least one snapshot must exist before any logs can be deleted, this is a soft limit."
        ),
    ),
    KafkaSetting(
        "metadata.max.retention.ms",
        "long",
        "604800000",
        "read-only",
        "high",
        "",
        (
            "The number of milliseconds to keep a metadata log file or snapshot before deleting it. Since at "
            "least one snapshot must exist before any logs can be deleted, this is a soft limit."
        ),
    ),
    KafkaSetting(
        "metric.reporters",
        "list",
        "",
        "cluster-wide",
        "low",
        "",
        (
            "A list of classes to use as metrics reporters. Implementing the "
            "org.apache.kafka.common.metrics.MetricsReporter interface allows plugging in classes that will be "
            "notified of new metric creation. The JmxReporter is always included to register JMX statistics."
        ),
    ),
    KafkaSetting(
        "metrics.num.samples",
        "int",
        "2",
        "read-only",
        "low",
        "[1,...]",
        ("The number of samples maintained to compute metrics."),
    ),
    KafkaSetting(
        "metrics.recording.level",
        "string",
        "INFO",
        "read-only",
        "low",
        "",
        ("The highest recording level for metrics."),
    ),
    KafkaSetting(
        "metrics.sample.window.ms",
        "long",
        "30000",
        "read-only",
        "low",
        "[1,...]",
        ("The window of time a metrics sample is computed over."),
    ),
    KafkaSetting(
        "min.insync.replicas",
        "int",
        "1",
        "cluster-wide",
        "high",
        "[1,...]",
        (
            'When a producer sets acks to "all" (or "-1"), min.insync.replicas specifies the minimum number of '
            "replicas that must acknowledge a write for the write to be considered successful. If this minimum "
            "cannot be met, then the producer will raise an exception (either NotEnoughReplicas or "
            "NotEnoughReplicasAfterAppend). When used together, min.insync.replicas and acks allow you to enforce"
            " greater durability guarantees. A typical scenario would be to create a topic with a replication "
            'factor of 3, set min.insync.replicas to 2, and produce with acks of "all". This will ensure that the'
            " producer raises an exception if a majority of replicas do not receive a write."
        ),
    ),
    KafkaSetting(
        "node.id",
        "int",
        "-1",
        "read-only",
        "high",
        "",
        (
            "The node ID associated with the roles this process is playing when `process.roles` is non-empty. "
            "This is required configuration when running in KRaft mode."
        ),
    ),
    KafkaSetting(
        "num.io.threads",
        "int",
        "8",
        "cluster-wide",
        "high",
        "[1,...]",
        ("The number of threads that the server uses for processing requests, which may include disk I/O"),
    ),
    KafkaSetting(
        "num.network.threads",
        "int",
        "3",
        "cluster-wide",
        "high",
        "[1,...]",
        (
            "The number of threads that the server uses for receiving requests from the network and sending "
            "responses to the network. Noted: each listener (except for controller listener) creates its own "
            "thread pool."
        ),
    ),
    KafkaSetting(
        "num.partitions",
        "int",
        "1",
        "read-only",
        "medium",
        "[1,...]",
        ("The default number of log partitions per topic"),
    ),
    KafkaSetting(
        "num.recovery.threads.per.data.dir",
        "int",
        "1",
        "cluster-wide",
        "high",
        "[1,...]",
        ("The number of threads per data directory to be used for log recovery at startup and flushing at shutdown"),
    ),
    KafkaSetting(
        "num.replica.alter.log.dirs.threads",
        "int",
        None,
        "read-only",
        "high",
        "",
        ("The number of threads that can move replicas between log directories, which may include disk I/O"),
    ),
    KafkaSetting(
        "num.replica.fetchers",
        "int",
        "1",
        "cluster-wide",
        "high",
        "",
        (
            "Number of fetcher threads used to replicate records from each source broker. The total number of "
            "fetchers on each broker is bound by num.replica.fetchers multiplied by the number of brokers in the "
            "cluster.Increasing this value can increase the degree of I/O parallelism in the follower and leader "
            "broker at the cost of higher CPU and memory utilization."
        ),
    ),
    KafkaSetting(
        "offset.metadata.max.bytes",
        "int",
        "4096",
        "read-only",
        "high",
        "",
        ("The maximum size for a metadata entry associated with an offset commit."),
    ),
    KafkaSetting(
        "offsets.commit.required.acks",
        "short",
        "-1",
        "read-only",
        "high",
        "",
        ("The required acks before the commit can be accepted. In general, the default (-1) should not be overridden."),
    ),
    KafkaSetting(
        "offsets.commit.timeout.ms",
        "int",
        "5000",
        "read-only",
        "high",
        "[1,...]",
        (
            "Offset commit will be delayed until all replicas for the offsets topic receive the commit or this "
            "timeout is reached. This is similar to the producer request timeout."
        ),
    ),
    KafkaSetting(
        "offsets.load.buffer.size",
        "int",
        "5242880",
        "read-only",
        "high",
        "[1,...]",
        (
            "Batch size for reading from the offsets segments when loading offsets into the cache (soft-limit, "
            "overridden if records are too large)."
        ),
    ),
    KafkaSetting(
        "offsets.retention.check.interval.ms",
        "long",
        "600000",
        "read-only",
        "high",
        "[1,...]",
        ("Frequency at which to check for stale offsets"),
    ),
    KafkaSetting(
        "offsets.retention.minutes",
        "int",
        "10080",
        "read-only",
        "high",
        "[1,...]",
        (
            "For subscribed consumers, committed offset of a specific partition will be expired and discarded "
            "when 1) this retention period has elapsed after the consumer group loses all its consumers (i.e. "
            "becomes empty); 2) this retention period has elapsed since the last time an offset is committed for "
            "the partition and the group is no longer subscribed to the corresponding topic. For standalone "
            "consumers (using manual assignment), offsets will be expired after this retention period has elapsed"
            " since the time of last commit. Note that when a group is deleted via the delete-group request, its "
            "committed offsets will also be deleted without extra retention period; also when a topic is deleted "
            "via the delete-topic request, upon propagated metadata update any group's committed offsets for that"
            " topic will also be deleted without extra retention period."
        ),
    ),
    KafkaSetting(
        "offsets.topic.compression.codec",
        "int",
        "0",
        "read-only",
        "high",
        "",
        ('Compression codec for the offsets topic - compression may be used to achieve "atomic" commits.'),
    ),
    KafkaSetting(
        "offsets.topic.num.partitions",
        "int",
        "50",
        "read-only",
        "high",
        "[1,...]",
        ("The number of partitions for the offset commit topic (should not change after deployment)."),
    ),
    KafkaSetting(
        "offsets.topic.replication.factor",
        "short",
        "3",
        "read-only",
        "high",
        "[1,...]",
        (
            "The replication factor for the offsets topic (set higher to ensure availability). Internal topic "
            "creation will fail until the cluster size meets this replication factor requirement."
        ),
    ),
    KafkaSetting(
        "offsets.topic.segment.bytes",
        "int",
        "104857600",
        "read-only",
        "high",
        "[1,...]",
        (
            "The offsets topic segment bytes should be kept relatively small in order to facilitate faster log "
            "compaction and cache loads."
        ),
    ),
    KafkaSetting(
        "password.encoder.cipher.algorithm",
        "string",
        "AES/CBC/PKCS5Padding",
        "read-only",
        "low",
        "",
        ("The Cipher algorithm used for encoding dynamically configured passwords."),
    ),
    KafkaSetting(
        "password.encoder.iterations",
        "int",
        "4096",
        "read-only",
        "low",
        "[1024,...]",
        ("The iteration count used for encoding dynamically configured passwords."),
    ),
    KafkaSetting(
        "password.encoder.key.length",
        "int",
        "128",
        "read-only",
        "low",
        "[8,...]",
        ("The key length used for encoding dynamically configured passwords."),
    ),
    KafkaSetting(
        "password.encoder.keyfactory.algorithm",
        "string",
        None,
        "read-only",
        "low",
        "",
        (
            "The SecretKeyFactory algorithm used for encoding dynamically configured passwords. Default is "
            "PBKDF2WithHmacSHA512 if available and PBKDF2WithHmacSHA1 otherwise."
        ),
    ),
    KafkaSetting(
        "password.encoder.old.secret",
        "password",
        None,
        "read-only",
        "medium",
        "",
        (
            "The old secret that was used for encoding dynamically configured passwords. This is required only "
            "when the secret is updated. If specified, all dynamically encoded passwords are decoded using this "
            "old secret and re-encoded using password.encoder.secret when broker starts up."
        ),
    ),
    KafkaSetting(
        "password.encoder.secret",
        "password",
        None,
        "read-only",
        "medium",
        "",
        ("The secret used for encoding dynamically configured passwords for this broker."),
    ),
    KafkaSetting(
        "principal.builder.class",
        "class",
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        "per-broker",
        "medium",
        "",
        (
            "The fully qualified name of a class that implements the KafkaPrincipalBuilder interface, which is "
            "used to build the KafkaPrincipal object used during authorization. If no principal builder is "
            "defined, the default behavior depends on the security protocol in use. For SSL authentication, the "
            "principal will be derived using the rules defined by ssl.principal.mapping.rules applied on the "
            "distinguished name from the client certificate if one is provided; otherwise, if client "
            "authentication is not required, the principal name will be ANONYMOUS. For SASL authentication, the "
            "principal will be derived using the rules defined by sasl.kerberos.principal.to.local.rules if "
            "GSSAPI is in use, and the SASL authentication ID for other mechanisms. For PLAINTEXT, the principal "
            "will be ANONYMOUS."
        ),
    ),
    KafkaSetting(
        "process.roles",
        "list",
        "",
        "read-only",
        "high",
        "[broker, controller]",
        (
            "The roles that this process plays: 'broker', 'controller', or 'broker,controller' if it is both. "
            "This configuration is only applicable for clusters in KRaft (Kafka Raft) mode (instead of "
            "ZooKeeper). Leave this config undefined or empty for ZooKeeper clusters."
        ),
    ),
    KafkaSetting(
        "producer.id.expiration.ms",
        "int",
        "86400000",
        "cluster-wide",
        "low",
        "[1,...]",
        (
            "The time in ms that a topic partition leader will wait before expiring producer IDs. Producer IDs "
            "will not expire while a transaction associated to them is still ongoing. Note that producer IDs may "
            "expire sooner if the last write from the producer ID is deleted due to the topic's retention "
            "settings. Setting this value the same or higher than delivery.timeout.ms can help prevent expiration"
            " during retries and protect against message duplication, but the default should be reasonable for "
            "most use cases."
        ),
    ),
    KafkaSetting(
        "producer.purgatory.purge.interval.requests",
        "int",
        "1000",
        "read-only",
        "medium",
        "",
        ("The purge interval (in number of requests) of the producer request purgatory"),
    ),
    KafkaSetting(
        "queued.max.request.bytes",
        "long",
        "-1",
        "read-only",
        "medium",
        "",
        ("The number of queued bytes allowed before no more requests are read"),
    ),
    KafkaSetting(
        "queued.max.requests",
        "int",
        "500",
        "read-only",
        "high",
        "[1,...]",
        ("The number of queued requests allowed for data-plane, before blocking the network threads"),
    ),
    KafkaSetting(
        "quota.window.num",
        "int",
        "11",
        "read-only",
        "low",
        "[1,...]",
        ("The number of samples to retain in memory for client quotas"),
    ),
    KafkaSetting(
        "quota.window.size.seconds",
        "int",
        "1",
        "read-only",
        "low",
        "[1,...]",
        ("The time span of each sample for client quotas"),
    ),
    KafkaSetting(
        "remote.log.index.file.cache.total.size.bytes",
        "long",
        "1073741824",
        "cluster-wide",
        "low",
        "[1,...]",
        (
            "The total size of the space allocated to store index files fetched from remote storage in the local "
            "storage."
        ),
    ),
    KafkaSetting(
        "remote.log.manager.task.interval.ms",
        "long",
        "30000",
        "read-only",
        "low",
        "[1,...]",
        (
            "Interval at which remote log manager runs the scheduled tasks like copy segments, and clean up "
            "remote log segments."
        ),
    ),
    KafkaSetting(
        "remote.log.manager.thread.pool.size",
        "int",
        "10",
        "read-only",
        "medium",
        "[1,...]",
        (
            "Size of the thread pool used in scheduling tasks to copy segments, fetch remote log indexes and "
            "clean up remote log segments."
        ),
    ),
    KafkaSetting(
        "remote.log.metadata.custom.metadata.max.bytes",
        "int",
        "128",
        "read-only",
        "low",
        "[0,...]",
        (
            "The maximum size of custom metadata in bytes that the broker should accept from a remote storage "
            "plugin. If custom metadata exceeds this limit, the updated segment metadata will not be stored, the "
            "copied data will be attempted to delete, and the remote copying task for this topic-partition will "
            "stop with an error."
        ),
    ),
    KafkaSetting(
        "remote.log.metadata.manager.class.name",
        "string",
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
        "read-only",
        "medium",
        "non-empty string",
        ("Fully qualified class name of `RemoteLogMetadataManager` implementation."),
    ),
    KafkaSetting(
        "remote.log.metadata.manager.class.path",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Class path of the `RemoteLogMetadataManager` implementation. If specified, the "
            "RemoteLogMetadataManager implementation and its dependent libraries will be loaded by a dedicated "
            "classloader which searches this class path before the Kafka broker class path. The syntax of this "
            "parameter is same as the standard Java class path string."
        ),
    ),
    KafkaSetting(
        "remote.log.metadata.manager.impl.prefix",
        "string",
        "rlmm.config.",
        "read-only",
        "medium",
        "non-empty string",
        (
            "Prefix used for properties to be passed to RemoteLogMetadataManager implementation. For example this"
            " value can be `rlmm.config.`."
        ),
    ),
    KafkaSetting(
        "remote.log.metadata.manager.listener.name",
        "string",
        None,
        "read-only",
        "medium",
        "non-empty string",
        (
            "Listener name of the local broker to which it should get connected if needed by "
            "RemoteLogMetadataManager implementation."
        ),
    ),
    KafkaSetting(
        "remote.log.reader.max.pending.tasks",
        "int",
        "100",
        "read-only",
        "medium",
        "[1,...]",
        (
            "Maximum remote log reader thread pool task queue size. If the task queue is full, fetch requests are"
            " served with an error."
        ),
    ),
    KafkaSetting(
        "remote.log.reader.threads",
        "int",
        "10",
        "read-only",
        "medium",
        "[1,...]",
        ("Size of the thread pool that is allocated for handling remote log reads."),
    ),
    KafkaSetting(
        "remote.log.storage.manager.class.name",
        "string",
        None,
        "read-only",
        "medium",
        "non-empty string",
        ("Fully qualified class name of `RemoteStorageManager` implementation."),
    ),
    KafkaSetting(
        "remote.log.storage.manager.class.path",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Class path of the `RemoteStorageManager` implementation. If specified, the RemoteStorageManager "
            "implementation and its dependent libraries will be loaded by a dedicated classloader which searches "
            "this class path before the Kafka broker class path. The syntax of this parameter is same as the "
            "standard Java class path string."
        ),
    ),
    KafkaSetting(
        "remote.log.storage.manager.impl.prefix",
        "string",
        "rsm.config.",
        "read-only",
        "medium",
        "non-empty string",
        (
            "Prefix used for properties to be passed to RemoteStorageManager implementation. For example this "
            "value can be `rsm.config.`."
        ),
    ),
    KafkaSetting(
        "remote.log.storage.system.enable",
        "boolean",
        "false",
        "read-only",
        "medium",
        "",
        (
            "Whether to enable tiered storage functionality in a broker or not. Valid values are `true` or "
            "`false` and the default value is false. When it is true broker starts all the services required for "
            "the tiered storage functionality."
        ),
    ),
    KafkaSetting(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "long",
        "9223372036854775807",
        "cluster-wide",
        "medium",
        "[0,...]",
        (
            "A long representing the upper bound (bytes/sec) on disk IO used for moving replica between log "
            "directories on the same broker. This property can be only set dynamically. It is suggested that the "
            "limit be kept above 1MB/s for accurate behaviour."
        ),
    ),
    KafkaSetting(
        "replica.fetch.backoff.ms",
        "int",
        "1000",
        "read-only",
        "medium",
        "[0,...]",
        ("The amount of time to sleep when fetch partition error occurs."),
    ),
    KafkaSetting(
        "replica.fetch.max.bytes",
        "int",
        "1048576",
        "read-only",
        "medium",
        "[0,...]",
        (
            "The number of bytes of messages to attempt to fetch for each partition. This is not an absolute "
            "maximum, if the first record batch in the first non-empty partition of the fetch is larger than this"
            " value, the record batch will still be returned to ensure that progress can be made. The maximum "
            "record batch size accepted by the broker is defined via message.max.bytes (broker config) or "
            "max.message.bytes (topic config)."
        ),
    ),
    KafkaSetting(
        "replica.fetch.min.bytes",
        "int",
        "1",
        "read-only",
        "high",
        "",
        (
            "Minimum bytes expected for each fetch response. If not enough bytes, wait up to "
            "replica.fetch.wait.max.ms (broker config)."
        ),
    ),
    KafkaSetting(
        "replica.fetch.response.max.bytes",
        "int",
        "10485760",
        "read-only",
        "medium",
        "[0,...]",
        (
            "Maximum bytes expected for the entire fetch response. Records are fetched in batches, and if the "
            "first record batch in the first non-empty partition of the fetch is larger than this value, the "
            "record batch will still be returned to ensure that progress can be made. As such, this is not an "
            "absolute maximum. The maximum record batch size accepted by the broker is defined via "
            "message.max.bytes (broker config) or max.message.bytes (topic config)."
        ),
    ),
    KafkaSetting(
        "replica.fetch.wait.max.ms",
        "int",
        "500",
        "read-only",
        "high",
        "",
        (
            "The maximum wait time for each fetcher request issued by follower replicas. This value should always"
            " be less than the replica.lag.time.max.ms at all times to prevent frequent shrinking of ISR for low "
            "throughput topics"
        ),
    ),
    KafkaSetting(
        "replica.high.watermark.checkpoint.interval.ms",
        "long",
        "5000",
        "read-only",
        "high",
        "",
        ("The frequency with which the high watermark is saved out to disk"),
    ),
    KafkaSetting(
        "replica.lag.time.max.ms",
        "long",
        "30000",
        "read-only",
        "high",
        "",
        (
            "If a follower hasn't sent any fetch requests or hasn't consumed up to the leaders log end offset for"
            " at least this time, the leader will remove the follower from isr"
        ),
    ),
    KafkaSetting(
        "replica.selector.class",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "The fully qualified class name that implements ReplicaSelector. This is used by the broker to find "
            "the preferred read replica. By default, we use an implementation that returns the leader."
        ),
    ),
    KafkaSetting(
        "replica.socket.receive.buffer.bytes",
        "int",
        "65536",
        "read-only",
        "high",
        "",
        ("The socket receive buffer for network requests to the leader for replicating data"),
    ),
    KafkaSetting(
        "replica.socket.timeout.ms",
        "int",
        "30000",
        "read-only",
        "high",
        "",
        ("The socket timeout for network requests. Its value should be at least replica.fetch.wait.max.ms"),
    ),
    KafkaSetting(
        "replication.quota.window.num",
        "int",
        "11",
        "read-only",
        "low",
        "[1,...]",
        ("The number of samples to retain in memory for replication quotas"),
    ),
    KafkaSetting(
        "replication.quota.window.size.seconds",
        "int",
        "1",
        "read-only",
        "low",
        "[1,...]",
        ("The time span of each sample for replication quotas"),
    ),
    KafkaSetting(
        "request.timeout.ms",
        "int",
        "30000",
        "read-only",
        "high",
        "",
        (
            "The configuration controls the maximum amount of time the client will wait for the response of a "
            "request. If the response is not received before the timeout elapses the client will resend the "
            "request if necessary or fail the request if retries are exhausted."
        ),
    ),
    KafkaSetting(
        "reserved.broker.max.id",
        "int",
        "1000",
        "read-only",
        "medium",
        "[0,...]",
        ("Max number that can be used for a broker.id"),
    ),
    KafkaSetting(
        "sasl.client.callback.handler.class",
        "class",
        None,
        "read-only",
        "medium",
        "",
        (
            "The fully qualified name of a SASL client callback handler class that implements the "
            "AuthenticateCallbackHandler interface."
        ),
    ),
    KafkaSetting(
        "sasl.enabled.mechanisms",
        "list",
        "GSSAPI",
        "per-broker",
        "medium",
        "",
        (
            "The list of SASL mechanisms enabled in the Kafka server. The list may contain any mechanism for "
            "which a security provider is available. Only GSSAPI is enabled by default."
        ),
    ),
    KafkaSetting(
        "sasl.jaas.config",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        (
            "JAAS login context parameters for SASL connections in the format used by JAAS configuration files. "
            "JAAS configuration file format is described here. The format for the value is: loginModuleClass "
            "controlFlag (optionName=optionValue)*;. For brokers, the config must be prefixed with listener "
            "prefix and SASL mechanism name in lower-case. For example, "
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=com.example.ScramLoginModule required;"
        ),
    ),
    KafkaSetting(
        "sasl.kerberos.kinit.cmd",
        "string",
        "/usr/bin/kinit",
        "per-broker",
        "medium",
        "",
        ("Kerberos kinit command path."),
    ),
    KafkaSetting(
        "sasl.kerberos.min.time.before.relogin",
        "long",
        "60000",
        "per-broker",
        "medium",
        "",
        ("Login thread sleep time between refresh attempts."),
    ),
    KafkaSetting(
        "sasl.kerberos.principal.to.local.rules",
        "list",
        "DEFAULT",
        "per-broker",
        "medium",
        "",
        (
            "A list of rules for mapping from principal names to short names (typically operating system "
            "usernames). The rules are evaluated in order and the first rule that matches a principal name is "
            "used to map it to a short name. Any later rules in the list are ignored. By default, principal names"
            " of the form {username}/{hostname}@{REALM} are mapped to {username}. For more details on the format "
            "please see security authorization and acls. Note that this configuration is ignored if an extension "
            "of KafkaPrincipalBuilder is provided by the principal.builder.class configuration."
        ),
    ),
    KafkaSetting(
        "sasl.kerberos.service.name",
        "string",
        None,
        "per-broker",
        "medium",
        "",
        (
            "The Kerberos principal name that Kafka runs as. This can be defined either in Kafka's JAAS config or"
            " in Kafka's config."
        ),
    ),
    KafkaSetting(
        "sasl.kerberos.ticket.renew.jitter",
        "double",
        "0.05",
        "per-broker",
        "medium",
        "",
        ("Percentage of random jitter added to the renewal time."),
    ),
    KafkaSetting(
        "sasl.kerberos.ticket.renew.window.factor",
        "double",
        "0.8",
        "per-broker",
        "medium",
        "",
        (
            "Login thread will sleep until the specified window factor of time from last refresh to ticket's "
            "expiry has been reached, at which time it will try to renew the ticket."
        ),
    ),
    KafkaSetting(
        "sasl.login.callback.handler.class",
        "class",
        None,
        "read-only",
        "medium",
        "",
        (
            "The fully qualified name of a SASL login callback handler class that implements the "
            "AuthenticateCallbackHandler interface. For brokers, login callback handler config must be prefixed "
            "with listener prefix and SASL mechanism name in lower-case. For example, listener.name.sasl_ssl.scra"
            "m-sha-256.sasl.login.callback.handler.class=com.example.CustomScramLoginCallbackHandler"
        ),
    ),
    KafkaSetting(
        "sasl.login.class",
        "class",
        None,
        "read-only",
        "medium",
        "",
        (
            "The fully qualified name of a class that implements the Login interface. For brokers, login config "
            "must be prefixed with listener prefix and SASL mechanism name in lower-case. For example, "
            "listener.name.sasl_ssl.scram-sha-256.sasl.login.class=com.example.CustomScramLogin"
        ),
    ),
    KafkaSetting(
        "sasl.login.connect.timeout.ms",
        "int",
        None,
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the external authentication provider connection timeout. "
            "Currently applies only to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.read.timeout.ms",
        "int",
        None,
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the external authentication provider read timeout. "
            "Currently applies only to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.refresh.buffer.seconds",
        "short",
        "300",
        "per-broker",
        "medium",
        "",
        (
            "The amount of buffer time before credential expiration to maintain when refreshing a credential, in "
            "seconds. If a refresh would otherwise occur closer to expiration than the number of buffer seconds "
            "then the refresh will be moved up to maintain as much of the buffer time as possible. Legal values "
            "are between 0 and 3600 (1 hour); a default value of 300 (5 minutes) is used if no value is "
            "specified. This value and sasl.login.refresh.min.period.seconds are both ignored if their sum "
            "exceeds the remaining lifetime of a credential. Currently applies only to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.refresh.min.period.seconds",
        "short",
        "60",
        "per-broker",
        "medium",
        "",
        (
            "The desired minimum time for the login refresh thread to wait before refreshing a credential, in "
            "seconds. Legal values are between 0 and 900 (15 minutes); a default value of 60 (1 minute) is used "
            "if no value is specified. This value and sasl.login.refresh.buffer.seconds are both ignored if their"
            " sum exceeds the remaining lifetime of a credential. Currently applies only to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.refresh.window.factor",
        "double",
        "0.8",
        "per-broker",
        "medium",
        "",
        (
            "Login refresh thread will sleep until the specified window factor relative to the credential's "
            "lifetime has been reached, at which time it will try to refresh the credential. Legal values are "
            "between 0.5 (50%) and 1.0 (100%) inclusive; a default value of 0.8 (80%) is used if no value is "
            "specified. Currently applies only to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.refresh.window.jitter",
        "double",
        "0.05",
        "per-broker",
        "medium",
        "",
        (
            "The maximum amount of random jitter relative to the credential's lifetime that is added to the login"
            " refresh thread's sleep time. Legal values are between 0 and 0.25 (25%) inclusive; a default value "
            "of 0.05 (5%) is used if no value is specified. Currently applies only to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.retry.backoff.max.ms",
        "long",
        "10000",
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the maximum wait between login attempts to the external "
            "authentication provider. Login uses an exponential backoff algorithm with an initial wait based on "
            "the sasl.login.retry.backoff.ms setting and will double in wait length between attempts up to a "
            "maximum wait length specified by the sasl.login.retry.backoff.max.ms setting. Currently applies only"
            " to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.login.retry.backoff.ms",
        "long",
        "100",
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the initial wait between login attempts to the external "
            "authentication provider. Login uses an exponential backoff algorithm with an initial wait based on "
            "the sasl.login.retry.backoff.ms setting and will double in wait length between attempts up to a "
            "maximum wait length specified by the sasl.login.retry.backoff.max.ms setting. Currently applies only"
            " to OAUTHBEARER."
        ),
    ),
    KafkaSetting(
        "sasl.mechanism.controller.protocol",
        "string",
        "GSSAPI",
        "read-only",
        "high",
        "",
        ("SASL mechanism used for communication with controllers. Default is GSSAPI."),
    ),
    KafkaSetting(
        "sasl.mechanism.inter.broker.protocol",
        "string",
        "GSSAPI",
        "per-broker",
        "medium",
        "",
        ("SASL mechanism used for inter-broker communication. Default is GSSAPI."),
    ),
    KafkaSetting(
        "sasl.oauthbearer.clock.skew.seconds",
        "int",
        "30",
        "read-only",
        "low",
        "",
        (
            "The (optional) value in seconds to allow for differences between the time of the OAuth/OIDC identity"
            " provider and the broker."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.expected.audience",
        "list",
        None,
        "read-only",
        "low",
        "",
        (
            "The (optional) comma-delimited setting for the broker to use to verify that the JWT was issued for "
            'one of the expected audiences. The JWT will be inspected for the standard OAuth "aud" claim and if '
            'this value is set, the broker will match the value from JWT\'s "aud" claim to see if there is an '
            "exact match. If there is no match, the broker will reject the JWT and authentication will fail."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.expected.issuer",
        "string",
        None,
        "read-only",
        "low",
        "",
        (
            "The (optional) setting for the broker to use to verify that the JWT was created by the expected "
            'issuer. The JWT will be inspected for the standard OAuth "iss" claim and if this value is set, the '
            'broker will match it exactly against what is in the JWT\'s "iss" claim. If there is no match, the '
            "broker will reject the JWT and authentication will fail."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "long",
        "3600000",
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the broker to wait between refreshing its JWKS (JSON Web "
            "Key Set) cache that contains the keys to verify the signature of the JWT."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "long",
        "10000",
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the maximum wait between attempts to retrieve the JWKS "
            "(JSON Web Key Set) from the external authentication provider. JWKS retrieval uses an exponential "
            "backoff algorithm with an initial wait based on the sasl.oauthbearer.jwks.endpoint.retry.backoff.ms "
            "setting and will double in wait length between attempts up to a maximum wait length specified by the"
            " sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms setting."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "long",
        "100",
        "read-only",
        "low",
        "",
        (
            "The (optional) value in milliseconds for the initial wait between JWKS (JSON Web Key Set) retrieval "
            "attempts from the external authentication provider. JWKS retrieval uses an exponential backoff "
            "algorithm with an initial wait based on the sasl.oauthbearer.jwks.endpoint.retry.backoff.ms setting "
            "and will double in wait length between attempts up to a maximum wait length specified by the "
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms setting."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.jwks.endpoint.url",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "The OAuth/OIDC provider URL from which the provider's JWKS (JSON Web Key Set) can be retrieved. The "
            "URL can be HTTP(S)-based or file-based. If the URL is HTTP(S)-based, the JWKS data will be retrieved"
            " from the OAuth/OIDC provider via the configured URL on broker startup. All then-current keys will "
            "be cached on the broker for incoming requests. If an authentication request is received for a JWT "
            'that includes a "kid" header claim value that isn\'t yet in the cache, the JWKS endpoint will be '
            "queried again on demand. However, the broker polls the URL every "
            "sasl.oauthbearer.jwks.endpoint.refresh.ms milliseconds to refresh the cache with any forthcoming "
            "keys before any JWT requests that include them are received. If the URL is file-based, the broker "
            "will load the JWKS file from a configured location on startup. In the event that the JWT includes a "
            '"kid" header value that isn\'t in the JWKS file, the broker will reject the JWT and authentication '
            "will fail."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.scope.claim.name",
        "string",
        "scope",
        "read-only",
        "low",
        "",
        (
            'The OAuth claim for the scope is often named "scope", but this (optional) setting can provide a '
            "different name to use for the scope included in the JWT payload's claims if the OAuth/OIDC provider "
            "uses a different name for that claim."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.sub.claim.name",
        "string",
        "sub",
        "read-only",
        "low",
        "",
        (
            'The OAuth claim for the subject is often named "sub", but this (optional) setting can provide a '
            "different name to use for the subject included in the JWT payload's claims if the OAuth/OIDC "
            "provider uses a different name for that claim."
        ),
    ),
    KafkaSetting(
        "sasl.oauthbearer.token.endpoint.url",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "The URL for the OAuth/OIDC identity provider. If the URL is HTTP(S)-based, it is the issuer's token "
            "endpoint URL to which requests will be made to login based on the configuration in sasl.jaas.config."
            " If the URL is file-based, it specifies a file containing an access token (in JWT serialized form) "
            "issued by the OAuth/OIDC identity provider to use for authorization."
        ),
    ),
    KafkaSetting(
        "sasl.server.callback.handler.class",
        "class",
        None,
        "read-only",
        "medium",
        "",
        (
            "The fully qualified name of a SASL server callback handler class that implements the "
            "AuthenticateCallbackHandler interface. Server callback handlers must be prefixed with listener "
            "prefix and SASL mechanism name in lower-case. For example, listener.name.sasl_ssl.plain.sasl.server."
            "callback.handler.class=com.example.CustomPlainCallbackHandler."
        ),
    ),
    KafkaSetting(
        "sasl.server.max.receive.size",
        "int",
        "524288",
        "read-only",
        "medium",
        "",
        (
            "The maximum receive size allowed before and during initial SASL authentication. Default receive size"
            " is 512KB. GSSAPI limits requests to 64K, but we allow upto 512KB by default for custom SASL "
            "mechanisms. In practice, PLAIN, SCRAM and OAUTH mechanisms can use much smaller limits."
        ),
    ),
    KafkaSetting(
        "security.inter.broker.protocol",
        "string",
        "PLAINTEXT",
        "read-only",
        "medium",
        "[PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL]",
        (
            "Security protocol used to communicate between brokers. Valid values are: PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL. It is an error to set this and inter.broker.listener.name properties at "
            "the same time."
        ),
    ),
    KafkaSetting(
        "security.providers",
        "string",
        None,
        "read-only",
        "low",
        "",
        (
            "A list of configurable creator classes each returning a provider implementing security algorithms. "
            "These classes should implement the org.apache.kafka.common.security.auth.SecurityProviderCreator "
            "interface."
        ),
    ),
    KafkaSetting(
        "socket.connection.setup.timeout.max.ms",
        "long",
        "30000",
        "read-only",
        "medium",
        "",
        (
            "The maximum amount of time the client will wait for the socket connection to be established. The "
            "connection setup timeout will increase exponentially for each consecutive connection failure up to "
            "this maximum. To avoid connection storms, a randomization factor of 0.2 will be applied to the "
            "timeout resulting in a random range between 20% below and 20% above the computed value."
        ),
    ),
    KafkaSetting(
        "socket.connection.setup.timeout.ms",
        "long",
        "10000",
        "read-only",
        "medium",
        "",
        (
            "The amount of time the client will wait for the socket connection to be established. If the "
            "connection is not built before the timeout elapses, clients will close the socket channel. This "
            "value is the initial backoff value and will increase exponentially for each consecutive connection "
            "failure, up to the socket.connection.setup.timeout.max.ms value."
        ),
    ),
    KafkaSetting(
        "socket.listen.backlog.size",
        "int",
        "50",
        "read-only",
        "medium",
        "[1,...]",
        (
            "The maximum number of pending connections on the socket. In Linux, you may also need to configure "
            "`somaxconn` and `tcp_max_syn_backlog` kernel parameters accordingly to make the configuration takes "
            "effect."
        ),
    ),
    KafkaSetting(
        "socket.receive.buffer.bytes",
        "int",
        "102400",
        "read-only",
        "high",
        "",
        ("The SO_RCVBUF buffer of the socket server sockets. If the value is -1, the OS default will be used."),
    ),
    KafkaSetting(
        "socket.request.max.bytes",
        "int",
        "104857600",
        "read-only",
        "high",
        "[1,...]",
        ("The maximum number of bytes in a socket request"),
    ),
    KafkaSetting(
        "socket.send.buffer.bytes",
        "int",
        "102400",
        "read-only",
        "high",
        "",
        ("The SO_SNDBUF buffer of the socket server sockets. If the value is -1, the OS default will be used."),
    ),
    KafkaSetting(
        "ssl.allow.dn.changes",
        "boolean",
        "false",
        "read-only",
        "low",
        "",
        (
            "Indicates whether changes to the certificate distinguished name should be allowed during a dynamic "
            "reconfiguration of certificates or not."
        ),
    ),
    KafkaSetting(
        "ssl.allow.san.changes",
        "boolean",
        "false",
        "read-only",
        "low",
        "",
        (
            "Indicates whether changes to the certificate subject alternative names should be allowed during a "
            "dynamic reconfiguration of certificates or not."
        ),
    ),
    KafkaSetting(
        "ssl.cipher.suites",
        "list",
        "",
        "per-broker",
        "medium",
        "",
        (
            "A list of cipher suites. This is a named combination of authentication, encryption, MAC and key "
            "exchange algorithm used to negotiate the security settings for a network connection using TLS or SSL"
            " network protocol. By default all the available cipher suites are supported."
        ),
    ),
    KafkaSetting(
        "ssl.client.auth",
        "string",
        "none",
        "per-broker",
        "medium",
        "[required, requested, none]",
        (
            "Configures kafka broker to request client authentication. The following settings are common: "
            "ssl.client.auth=required If set to required client authentication is required. "
            "ssl.client.auth=requested This means client authentication is optional. unlike required, if this "
            "option is set client can choose not to provide authentication information about itself "
            "ssl.client.auth=none This means client authentication is not needed."
        ),
    ),
    KafkaSetting(
        "ssl.enabled.protocols",
        "list",
        "TLSv1.2,TLSv1.3",
        "per-broker",
        "medium",
        "",
        (
            "The list of protocols enabled for SSL connections. The default is 'TLSv1.2,TLSv1.3' when running "
            "with Java 11 or newer, 'TLSv1.2' otherwise. With the default value for Java 11, clients and servers "
            "will prefer TLSv1.3 if both support it and fallback to TLSv1.2 otherwise (assuming both support at "
            "least TLSv1.2). This default should be fine for most cases. Also see the config documentation for "
            "`ssl.protocol`."
        ),
    ),
    KafkaSetting(
        "ssl.endpoint.identification.algorithm",
        "string",
        "https",
        "per-broker",
        "low",
        "",
        ("The endpoint identification algorithm to validate server hostname using server certificate."),
    ),
    KafkaSetting(
        "ssl.engine.factory.class",
        "class",
        None,
        "per-broker",
        "low",
        "",
        (
            "The class of type org.apache.kafka.common.security.auth.SslEngineFactory to provide SSLEngine "
            "objects. Default value is org.apache.kafka.common.security.ssl.DefaultSslEngineFactory. "
            "Alternatively, setting this to "
            "org.apache.kafka.common.security.ssl.CommonNameLoggingSslEngineFactory will log the common name of "
            "expired SSL certificates used by clients to authenticate at any of the brokers with log level INFO. "
            "Note that this will cause a tiny delay during establishment of new connections from mTLS clients to "
            "brokers due to the extra code for examining the certificate chain provided by the client. Note "
            "further that the implementation uses a custom truststore based on the standard Java truststore and "
            "thus might be considered a security risk due to not being as mature as the standard one."
        ),
    ),
    KafkaSetting(
        "ssl.key.password",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        ("The password of the private key in the key store file or the PEM key specified in 'ssl.keystore.key'."),
    ),
    KafkaSetting(
        "ssl.keymanager.algorithm",
        "string",
        "SunX509",
        "per-broker",
        "medium",
        "",
        (
            "The algorithm used by key manager factory for SSL connections. Default value is the key manager "
            "factory algorithm configured for the Java Virtual Machine."
        ),
    ),
    KafkaSetting(
        "ssl.keystore.certificate.chain",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        (
            "Certificate chain in the format specified by 'ssl.keystore.type'. Default SSL engine factory "
            "supports only PEM format with a list of X.509 certificates"
        ),
    ),
    KafkaSetting(
        "ssl.keystore.key",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        (
            "Private key in the format specified by 'ssl.keystore.type'. Default SSL engine factory supports only"
            " PEM format with PKCS#8 keys. If the key is encrypted, key password must be specified using "
            "'ssl.key.password'"
        ),
    ),
    KafkaSetting(
        "ssl.keystore.location",
        "string",
        None,
        "per-broker",
        "medium",
        "",
        (
            "The location of the key store file. This is optional for client and can be used for two-way "
            "authentication for client."
        ),
    ),
    KafkaSetting(
        "ssl.keystore.password",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        (
            "The store password for the key store file. This is optional for client and only needed if "
            "'ssl.keystore.location' is configured. Key store password is not supported for PEM format."
        ),
    ),
    KafkaSetting(
        "ssl.keystore.type",
        "string",
        "JKS",
        "per-broker",
        "medium",
        "",
        (
            "The file format of the key store file. This is optional for client. The values currently supported "
            "by the default `ssl.engine.factory.class` are [JKS, PKCS12, PEM]."
        ),
    ),
    KafkaSetting(
        "ssl.principal.mapping.rules",
        "string",
        "DEFAULT",
        "read-only",
        "low",
        "",
        (
            "A list of rules for mapping from distinguished name from the client certificate to short name. The "
            "rules are evaluated in order and the first rule that matches a principal name is used to map it to a"
            " short name. Any later rules in the list are ignored. By default, distinguished name of the X.500 "
            "certificate will be the principal. For more details on the format please see security authorization "
            "and acls. Note that this configuration is ignored if an extension of KafkaPrincipalBuilder is "
            "provided by the principal.builder.class configuration."
        ),
    ),
    KafkaSetting(
        "ssl.protocol",
        "string",
        "TLSv1.3",
        "per-broker",
        "medium",
        "",
        (
            "The SSL protocol used to generate the SSLContext. The default is 'TLSv1.3' when running with Java 11"
            " or newer, 'TLSv1.2' otherwise. This value should be fine for most use cases. Allowed values in "
            "recent JVMs are 'TLSv1.2' and 'TLSv1.3'. 'TLS', 'TLSv1.1', 'SSL', 'SSLv2' and 'SSLv3' may be "
            "supported in older JVMs, but their usage is discouraged due to known security vulnerabilities. With "
            "the default value for this config and 'ssl.enabled.protocols', clients will downgrade to 'TLSv1.2' "
            "if the server does not support 'TLSv1.3'. If this config is set to 'TLSv1.2', clients will not use "
            "'TLSv1.3' even if it is one of the values in ssl.enabled.protocols and the server only supports "
            "'TLSv1.3'."
        ),
    ),
    KafkaSetting(
        "ssl.provider",
        "string",
        None,
        "per-broker",
        "medium",
        "",
        (
            "The name of the security provider used for SSL connections. Default value is the default security "
            "provider of the JVM."
        ),
    ),
    KafkaSetting(
        "ssl.secure.random.implementation",
        "string",
        None,
        "per-broker",
        "low",
        "",
        ("The SecureRandom PRNG implementation to use for SSL cryptography operations."),
    ),
    KafkaSetting(
        "ssl.trustmanager.algorithm",
        "string",
        "PKIX",
        "per-broker",
        "medium",
        "",
        (
            "The algorithm used by trust manager factory for SSL connections. Default value is the trust manager "
            "factory algorithm configured for the Java Virtual Machine."
        ),
    ),
    KafkaSetting(
        "ssl.truststore.certificates",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        (
            "Trusted certificates in the format specified by 'ssl.truststore.type'. Default SSL engine factory "
            "supports only PEM format with X.509 certificates."
        ),
    ),
    KafkaSetting(
        "ssl.truststore.location",
        "string",
        None,
        "per-broker",
        "medium",
        "",
        ("The location of the trust store file."),
    ),
    KafkaSetting(
        "ssl.truststore.password",
        "password",
        None,
        "per-broker",
        "medium",
        "",
        (
            "The password for the trust store file. If a password is not set, trust store file configured will "
            "still be used, but integrity checking is disabled. Trust store password is not supported for PEM "
            "format."
        ),
    ),
    KafkaSetting(
        "ssl.truststore.type",
        "string",
        "JKS",
        "per-broker",
        "medium",
        "",
        (
            "The file format of the trust store file. The values currently supported by the default "
            "`ssl.engine.factory.class` are [JKS, PKCS12, PEM]."
        ),
    ),
    KafkaSetting(
        "telemetry.max.bytes",
        "int",
        "1048576",
        "read-only",
        "low",
        "[1,...]",
        (
            "The maximum size (after compression if compression is used) of telemetry metrics pushed from a "
            "client to the broker. The default value is 1048576 (1 MB)."
        ),
    ),
    KafkaSetting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        "10000",
        "read-only",
        "low",
        "[1,...]",
        ("The interval at which to rollback transactions that have timed out"),
    ),
    KafkaSetting(
        "transaction.max.timeout.ms",
        "int",
        "900000",
        "read-only",
        "high",
        "[1,...]",
        (
            "The maximum allowed timeout for transactions. If a client's requested transaction time exceed this, "
            "then the broker will return an error in InitProducerIdRequest. This prevents a client from too large"
            " of a timeout, which can stall consumers reading from topics included in the transaction."
        ),
    ),
    KafkaSetting(
        "transaction.partition.verification.enable",
        "boolean",
        "true",
        "cluster-wide",
        "low",
        "",
        (
            "Enable verification that checks that the partition has been added to the transaction before writing "
            "transactional records to the partition"
        ),
    ),
    KafkaSetting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        "3600000",
        "read-only",
        "low",
        "[1,...]",
        (
            "The interval at which to remove transactions that have expired due to transactional.id.expiration.ms"
            " passing"
        ),
    ),
    KafkaSetting(
        "transaction.state.log.load.buffer.size",
        "int",
        "5242880",
        "read-only",
        "high",
        "[1,...]",
        (
            "Batch size for reading from the transaction log segments when loading producer ids and transactions "
            "into the cache (soft-limit, overridden if records are too large)."
        ),
    ),
    KafkaSetting(
        "transaction.state.log.min.isr",
        "int",
        "2",
        "read-only",
        "high",
        "[1,...]",
        ("Overridden min.insync.replicas config for the transaction topic."),
    ),
    KafkaSetting(
        "transaction.state.log.num.partitions",
        "int",
        "50",
        "read-only",
        "high",
        "[1,...]",
        ("The number of partitions for the transaction topic (should not change after deployment)."),
    ),
    KafkaSetting(
        "transaction.state.log.replication.factor",
        "short",
        "3",
        "read-only",
        "high",
        "[1,...]",
        (
            "The replication factor for the transaction topic (set higher to ensure availability). Internal topic"
            " creation will fail until the cluster size meets this replication factor requirement."
        ),
    ),
    KafkaSetting(
        "transaction.state.log.segment.bytes",
        "int",
        "104857600",
        "read-only",
        "high",
        "[1,...]",
        (
            "The transaction topic segment bytes should be kept relatively small in order to facilitate faster "
            "log compaction and cache loads"
        ),
    ),
    KafkaSetting(
        "transactional.id.expiration.ms",
        "int",
        "604800000",
        "read-only",
        "high",
        "[1,...]",
        (
            "The time in ms that the transaction coordinator will wait without receiving any transaction status "
            "updates for the current transaction before expiring its transactional id. Transactional IDs will not"
            " expire while a the transaction is still ongoing."
        ),
    ),
    KafkaSetting(
        "unclean.leader.election.enable",
        "boolean",
        "false",
        "cluster-wide",
        "high",
        "",
        (
            "Indicates whether to enable replicas not in the ISR set to be elected as leader as a last resort, "
            "even though doing so may result in data loss"
        ),
    ),
    KafkaSetting(
        "zookeeper.clientCnxnSocket",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Typically set to org.apache.zookeeper.ClientCnxnSocketNetty when using TLS connectivity to "
            "ZooKeeper. Overrides any explicit value set via the same-named zookeeper.clientCnxnSocket system "
            "property."
        ),
    ),
    KafkaSetting(
        "zookeeper.connect",
        "string",
        None,
        "read-only",
        "high",
        "",
        (
            "Specifies the ZooKeeper connection string in the form hostname:port where host and port are the host"
            " and port of a ZooKeeper server. To allow connecting through other ZooKeeper nodes when that "
            "ZooKeeper machine is down you can also specify multiple hosts in the form "
            "hostname1:port1,hostname2:port2,hostname3:port3. The server can also have a ZooKeeper chroot path as"
            " part of its ZooKeeper connection string which puts its data under some path in the global ZooKeeper"
            " namespace. For example to give a chroot path of /chroot/path you would give the connection string "
            "as hostname1:port1,hostname2:port2,hostname3:port3/chroot/path."
        ),
    ),
    KafkaSetting(
        "zookeeper.connection.timeout.ms",
        "int",
        None,
        "read-only",
        "high",
        "",
        (
            "The max time that the client waits to establish a connection to ZooKeeper. If not set, the value in "
            "zookeeper.session.timeout.ms is used"
        ),
    ),
    KafkaSetting(
        "zookeeper.max.in.flight.requests",
        "int",
        "10",
        "read-only",
        "high",
        "[1,...]",
        ("The maximum number of unacknowledged requests the client will send to ZooKeeper before blocking."),
    ),
    KafkaSetting(
        "zookeeper.metadata.migration.enable",
        "boolean",
        "false",
        "read-only",
        "high",
        "",
        ("Enable ZK to KRaft migration"),
    ),
    KafkaSetting(
        "zookeeper.session.timeout.ms",
        "int",
        "18000",
        "read-only",
        "high",
        "",
        ("Zookeeper session timeout"),
    ),
    KafkaSetting(
        "zookeeper.set.acl",
        "boolean",
        "false",
        "read-only",
        "high",
        "",
        ("Set client to use secure ACLs"),
    ),
    KafkaSetting(
        "zookeeper.ssl.cipher.suites",
        "list",
        None,
        "read-only",
        "low",
        "",
        (
            "Specifies the enabled cipher suites to be used in ZooKeeper TLS negotiation (csv). Overrides any "
            "explicit value set via the zookeeper.ssl.ciphersuites system property (note the single word "
            '"ciphersuites"). The default value of null means the list of enabled cipher suites is determined by '
            "the Java runtime being used."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.client.enable",
        "boolean",
        "false",
        "read-only",
        "medium",
        "",
        (
            "Set client to use TLS when connecting to ZooKeeper. An explicit value overrides any value set via "
            "the zookeeper.client.secure system property (note the different name). Defaults to false if neither "
            "is set; when true, zookeeper.clientCnxnSocket must be set (typically to "
            "org.apache.zookeeper.ClientCnxnSocketNetty); other values to set may include "
            "zookeeper.ssl.cipher.suites, zookeeper.ssl.crl.enable, zookeeper.ssl.enabled.protocols, "
            "zookeeper.ssl.endpoint.identification.algorithm, zookeeper.ssl.keystore.location, "
            "zookeeper.ssl.keystore.password, zookeeper.ssl.keystore.type, zookeeper.ssl.ocsp.enable, "
            "zookeeper.ssl.protocol, zookeeper.ssl.truststore.location, zookeeper.ssl.truststore.password, "
            "zookeeper.ssl.truststore.type"
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.crl.enable",
        "boolean",
        "false",
        "read-only",
        "low",
        "",
        (
            "Specifies whether to enable Certificate Revocation List in the ZooKeeper TLS protocols. Overrides "
            "any explicit value set via the zookeeper.ssl.crl system property (note the shorter name)."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.enabled.protocols",
        "list",
        None,
        "read-only",
        "low",
        "",
        (
            "Specifies the enabled protocol(s) in ZooKeeper TLS negotiation (csv). Overrides any explicit value "
            "set via the zookeeper.ssl.enabledProtocols system property (note the camelCase). The default value "
            "of null means the enabled protocol will be the value of the zookeeper.ssl.protocol configuration "
            "property."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.endpoint.identification.algorithm",
        "string",
        "HTTPS",
        "read-only",
        "low",
        "",
        (
            "Specifies whether to enable hostname verification in the ZooKeeper TLS negotiation process, with "
            '(case-insensitively) "https" meaning ZooKeeper hostname verification is enabled and an explicit '
            "blank value meaning it is disabled (disabling it is only recommended for testing purposes). An "
            'explicit value overrides any "true" or "false" value set via the zookeeper.ssl.hostnameVerification '
            "system property (note the different name and values; true implies https and false implies blank)."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.keystore.location",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Keystore location when using a client-side certificate with TLS connectivity to ZooKeeper. Overrides"
            " any explicit value set via the zookeeper.ssl.keyStore.location system property (note the "
            "camelCase)."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.keystore.password",
        "password",
        None,
        "read-only",
        "medium",
        "",
        (
            "Keystore password when using a client-side certificate with TLS connectivity to ZooKeeper. Overrides"
            " any explicit value set via the zookeeper.ssl.keyStore.password system property (note the "
            "camelCase). Note that ZooKeeper does not support a key password different from the keystore "
            "password, so be sure to set the key password in the keystore to be identical to the keystore "
            "password; otherwise the connection attempt to Zookeeper will fail."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.keystore.type",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Keystore type when using a client-side certificate with TLS connectivity to ZooKeeper. Overrides any"
            " explicit value set via the zookeeper.ssl.keyStore.type system property (note the camelCase). The "
            "default value of null means the type will be auto-detected based on the filename extension of the "
            "keystore."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.ocsp.enable",
        "boolean",
        "false",
        "read-only",
        "low",
        "",
        (
            "Specifies whether to enable Online Certificate Status Protocol in the ZooKeeper TLS protocols. "
            "Overrides any explicit value set via the zookeeper.ssl.ocsp system property (note the shorter name)."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.protocol",
        "string",
        "TLSv1.2",
        "read-only",
        "low",
        "",
        (
            "Specifies the protocol to be used in ZooKeeper TLS negotiation. An explicit value overrides any "
            "value set via the same-named zookeeper.ssl.protocol system property."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.truststore.location",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Truststore location when using TLS connectivity to ZooKeeper. Overrides any explicit value set via "
            "the zookeeper.ssl.trustStore.location system property (note the camelCase)."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.truststore.password",
        "password",
        None,
        "read-only",
        "medium",
        "",
        (
            "Truststore password when using TLS connectivity to ZooKeeper. Overrides any explicit value set via "
            "the zookeeper.ssl.trustStore.password system property (note the camelCase)."
        ),
    ),
    KafkaSetting(
        "zookeeper.ssl.truststore.type",
        "string",
        None,
        "read-only",
        "medium",
        "",
        (
            "Truststore type when using TLS connectivity to ZooKeeper. Overrides any explicit value set via the "
            "zookeeper.ssl.trustStore.type system property (note the camelCase). The default value of null means "
            "the type will be auto-detected based on the filename extension of the truststore."
        ),
    ),
)


def _authorizer_settings() -> tuple[KafkaSetting, ...]:
    """Kafka's ``AclAuthorizer`` settings: read from the broker's config by the authorizer, not
    defined by ``KafkaConfig`` (so absent from its reference), read-only."""
    zk_doc = "The authorizer's own ZooKeeper client setting (default: the broker's {})."
    out = [
        KafkaSetting(
            "super.users",
            "string",
            None,
            "read-only",
            "medium",
            "",
            "Semicolon-separated list of principals that have access to all resources for all actions from "
            "all hosts (AclAuthorizer); default: no super users.",
        ),
        KafkaSetting(
            "allow.everyone.if.no.acl.found",
            "boolean",
            "false",
            "read-only",
            "medium",
            "",
            "If true, a resource with no ACL is accessible to everyone (AclAuthorizer); default false.",
        ),
        KafkaSetting(
            "authorizer.zookeeper.url", "string", None, "read-only", "low", "", zk_doc.format("zookeeper.connect")
        ),
    ]
    for base in (
        "zookeeper.connection.timeout.ms",
        "zookeeper.session.timeout.ms",
        "zookeeper.max.in.flight.requests",
        "zookeeper.clientCnxnSocket",
        "zookeeper.ssl.client.enable",
        "zookeeper.ssl.keystore.location",
        "zookeeper.ssl.keystore.password",
        "zookeeper.ssl.keystore.type",
        "zookeeper.ssl.truststore.location",
        "zookeeper.ssl.truststore.password",
        "zookeeper.ssl.truststore.type",
        "zookeeper.ssl.protocol",
        "zookeeper.ssl.enabled.protocols",
        "zookeeper.ssl.cipher.suites",
        "zookeeper.ssl.endpoint.identification.algorithm",
        "zookeeper.ssl.crl.enable",
        "zookeeper.ssl.ocsp.enable",
    ):
        kind = next(x for x in _SETTINGS if x.name == base)
        out.append(
            KafkaSetting(
                "authorizer." + base, kind.type, None, "read-only", "low", kind.valid_values, zk_doc.format(base)
            )
        )
    return tuple(out)


#: every Kafka 3.7 broker setting by name (the authorizer's included)
KAFKA_SETTINGS: dict[str, KafkaSetting] = {s.name: s for s in _SETTINGS + _authorizer_settings()}

READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"

#: Kafka's ``SslConfigs.RECONFIGURABLE_CONFIGS``: dynamic only with a listener prefix
LISTENER_ONLY_DYNAMIC_SETTINGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)

#: Kafka's ``ListenerMechanismConfigs``: per listener they take the mechanism too
#: (``listener.name.<listener>.<mechanism>.<setting>``)
LISTENER_MECHANISM_SETTINGS = frozenset(
    {
        "sasl.jaas.config",
        "sasl.login.callback.handler.class",
        "sasl.login.class",
        "sasl.server.callback.handler.class",
        "connections.max.reauth.ms",
    }
)

#: Kafka's ``ClusterLevelListenerConfigs``: per listener, yet alterable as the cluster-wide default
CLUSTER_LEVEL_LISTENER_SETTINGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})

#: the settings Kafka takes with a ``listener.name.<listener>.`` prefix
PER_LISTENER_SETTINGS = (
    frozenset(n for n in KAFKA_SETTINGS if n.startswith(("ssl.", "sasl.")))
    | LISTENER_MECHANISM_SETTINGS
    | CLUSTER_LEVEL_LISTENER_SETTINGS
    | {"principal.builder.class"}
)

_LISTENER_RE = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")
_MECHANISM_RE = re.compile(r"^[A-Za-z0-9_-]+\.(.+)$")


class ListenerSetting(NamedTuple):
    """A ``listener.name.<listener>.[<mechanism>.]<setting>`` name taken apart."""

    listener: str
    mechanism: str | None
    base: str


def parse_listener_setting(name: str) -> ListenerSetting | None:
    """The parts of a per-listener setting name, or None if ``name`` is not one Kafka accepts
    (no ``listener.name.`` prefix, or a setting Kafka does not take per listener)."""
    m = _LISTENER_RE.match(name)
    if not m:
        return None
    listener, rest = m.group(1), m.group(2)
    if rest in PER_LISTENER_SETTINGS and rest not in LISTENER_MECHANISM_SETTINGS:
        return ListenerSetting(listener, None, rest)
    mm = _MECHANISM_RE.match(rest)
    if mm and mm.group(1) in LISTENER_MECHANISM_SETTINGS:
        return ListenerSetting(listener, rest[: -len(mm.group(1)) - 1], mm.group(1))
    if rest in LISTENER_MECHANISM_SETTINGS and rest == "connections.max.reauth.ms":
        return ListenerSetting(listener, None, rest)
    return None


def setting_for(name: str) -> KafkaSetting | None:
    """The Kafka setting ``name`` names: itself, or the base setting of a per-listener name; None if
    Kafka 3.7 has no such broker setting."""
    s = KAFKA_SETTINGS.get(name)
    if s is not None:
        return s
    parsed = parse_listener_setting(name)
    return None if parsed is None else KAFKA_SETTINGS.get(parsed.base)


def is_sensitive(name: str) -> bool:
    """True for a password-typed setting (per listener too): its value is never shown."""
    s = setting_for(name)
    return s is not None and s.sensitive


def update_mode(name: str) -> str | None:
    """Kafka's dynamic update mode of ``name`` (per-listener names: ``per-broker`` unless the base
    is a cluster-level listener setting); None for a name Kafka does not know."""
    parsed = parse_listener_setting(name) if name not in KAFKA_SETTINGS else None
    if parsed is not None:
        return CLUSTER_WIDE if parsed.base in CLUSTER_LEVEL_LISTENER_SETTINGS else PER_BROKER
    s = KAFKA_SETTINGS.get(name)
    return None if s is None else s.update_mode


_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "short": (-(2**15), 2**15 - 1), "long": (-(2**63), 2**63 - 1)}
_AT_LEAST_RE = re.compile(r"^\[(-?\d+),\.\.\.\]$")
_BETWEEN_RE = re.compile(r"^\[(-?\d+),\.\.\.,(-?\d+)\]$")


def check_value(name: str, value: str | None) -> None:
    """Raise ValueError (the message names the setting, what it expects and what was read, never a
    sensitive value) if ``value`` is not valid for the setting ``name`` by Kafka's type and its
    simple range rules; None (unset) is always valid."""
    s = setting_for(name)
    if s is None or value is None:
        return
    text = str(value).strip()
    shown = "[hidden]" if s.sensitive else repr(value)
    kind = s.type
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"{name}: expected a {kind}, read {shown}") from None
        m = _AT_LEAST_RE.match(s.valid_values) or _BETWEEN_RE.match(s.valid_values)
        if m:
            lo = max(lo, int(m.group(1)))
            if m.lastindex == 2:
                hi = min(hi, int(m.group(2)))
        if not lo <= n <= hi:
            raise ValueError(f"{name}: expected a {kind} in [{lo}, {hi}], read {shown}")
    elif kind == "double":
        try:
            float(text)
        except ValueError:
            raise ValueError(f"{name}: expected a double, read {shown}") from None
    elif kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name}: expected true or false, read {shown}")
    elif kind in ("string", "list") and s.valid_values.startswith("[") and "..." not in s.valid_values:
        allowed = {v.strip().lower() for v in s.valid_values.strip("[]").split(",") if v.strip()}
        given = [v.strip().lower() for v in text.split(",")] if kind == "list" else [text.lower()]
        bad = [v for v in given if v and v not in allowed]
        if allowed and bad and "null" not in allowed:
            raise ValueError(f"{name}: expected one of {s.valid_values}, read {shown}")


__all__ = [
    "CLUSTER_LEVEL_LISTENER_SETTINGS",
    "CLUSTER_WIDE",
    "KAFKA_SETTINGS",
    "KafkaSetting",
    "LISTENER_MECHANISM_SETTINGS",
    "LISTENER_ONLY_DYNAMIC_SETTINGS",
    "ListenerSetting",
    "PER_BROKER",
    "PER_LISTENER_SETTINGS",
    "READ_ONLY",
    "check_value",
    "is_sensitive",
    "parse_listener_setting",
    "setting_for",
    "update_mode",
]
