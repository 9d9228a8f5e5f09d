"""Principals: who a connection authenticated as, in Kafka's ``type:name`` form.

A PLAINTEXT or SSL-without-client-certificate connection is ``User:ANONYMOUS`` (Kafka's
``KafkaPrincipal.ANONYMOUS``); a SASL connection is ``User:<authorization id>``; an SSL connection
with a client certificate is ``User:<the certificate's subject, after ssl.principal.mapping.rules>``.
ACLs name principals in this same form (``User:alice``, ``User:*`` for everyone).

Thread-safe: principals are immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kafka's only principal type (``KafkaPrincipal.USER_TYPE``)
USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal: ``principal_type`` (``User``) and ``name``; ``str()`` gives ``User:alice``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); ValueError for text without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is written <type>:<name> (e.g. User:alice), read {text!r}")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


#: the principal of an unauthenticated connection (PLAINTEXT, or SSL without a client certificate)
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
