"""Security: who a connection is (principals), how it proved it (TLS, SASL) and what it may do
(the authorizer).  Kafka's ``org.apache.kafka.common.security`` and ``kafka.security``.

The broker's network layer gives every request the :class:`~pyklog.broker.security.principal.KafkaPrincipal`
its connection authenticated as, the listener it came in on and that listener's security protocol
(:class:`~pyklog.broker.server.network.Request`); request handlers authorize against those.
"""
