"""The client's side of SASL for pyklog's clients: a
:class:`~pyklog.connector.client.BrokerConnection` given ``sasl=`` (:class:`SaslCredentials`, or
the Kafka client settings ``sasl.mechanism`` + ``sasl.username`` / ``sasl.password`` or
``sasl.jaas.config``, :meth:`SaslCredentials.from_config`) authenticates right after its
ApiVersions negotiation with :func:`authenticate` (PLAIN, SCRAM-SHA-256/512: SaslHandshake v1 then
SaslAuthenticate v2, :mod:`pyklog.broker.security.sasl_client`).  A broker answering a session
lifetime (KIP-368, ``connections.max.reauth.ms``) gets a re-authentication on the same connection
before it ends: once 85-95 % of the lifetime has passed (:func:`reauth_delay_s`), at the
connection's next request with nothing in flight.

Thread-safety: values are immutable; authentication runs on the thread that owns the connection.
"""

from __future__ import annotations

import random

from pyklog.broker.security.sasl_client import MECHANISMS, SaslCredentials, authenticate

__all__ = ["MECHANISMS", "SaslCredentials", "authenticate", "reauth_delay_s"]


def reauth_delay_s(session_lifetime_ms: int) -> float | None:
    """When to re-authenticate after a session of that lifetime (Kafka's client picks 85-95 % of
    it); None for a session without an end."""
    if session_lifetime_ms <= 0:
        return None
    return session_lifetime_ms / 1000.0 * random.uniform(0.85, 0.95)
