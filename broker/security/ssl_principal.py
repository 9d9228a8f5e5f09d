"""Principals of TLS connections: Kafka's ``SslPrincipalMapper`` and the certificate's distinguished name.

A client that presents a certificate is ``User:<name>``, where ``<name>`` is the certificate's
subject in the distinguished-name form Kafka uses (RFC 2253/4514: most specific attribute first,
``CN=alice,OU=eng,O=acme,C=US``) transformed by ``ssl.principal.mapping.rules``:

* ``RULE:pattern/replacement/`` -- if the Java-style regular expression ``pattern`` matches the whole
  name, the name becomes ``replacement`` (``$1``.. refer to its groups); a trailing ``L`` or ``U``
  (``RULE:pattern/replacement/L``) makes the result lower or upper case;
* ``DEFAULT`` -- the name unchanged.

Rules are tried in order (separated by commas or new lines); the first that matches wins; a name no
rule matches is refused (Kafka's ``NoMatchingRule``: the connection is closed).  The default rule
list is ``DEFAULT``.  A connection without a client certificate is ``User:ANONYMOUS``.

Pure code (the certificate is parsed with ``cryptography``); thread-safe (immutable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyklog.broker.errors import ConfigError
from pyklog.broker.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal

# Kafka's SslPrincipalMapper.RULE_SPLITTER: DEFAULT | RULE:pattern/replacement/[LU] with \-escapes
_RULE = re.compile(
    r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?|([^,\n]*?))\s*(?:[,\n]|$)"
)


class NoMatchingRuleError(ValueError):
    """No ``ssl.principal.mapping.rules`` rule matches a certificate's name."""


@dataclass(frozen=True)
class _Rule:
    default: bool
    pattern: re.Pattern | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.default:
            return name
        assert self.pattern is not None
        m = self.pattern.fullmatch(name)
        if m is None:
            return None
        out = m.expand(self.replacement)
        if self.case == "L":
            out = out.lower()
        elif self.case == "U":
            out = out.upper()
        return out


def _java_replacement(text: str) -> str:
    """A Java ``Matcher.replaceAll`` replacement (``$1``, ``\\$`` escapes) as a Python template."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append("\\\\" if nxt == "\\" else nxt)
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1 : j]}>")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed once; :meth:`name` maps a distinguished name."""

    def __init__(self, rules: str | None = None):
        text = "DEFAULT" if rules is None or not rules.strip() else rules
        self.rules: list[_Rule] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot parse a rule at {text[pos:]!r}")
            pos = m.end()
            if m.group(1):
                self.rules.append(_Rule(True))
            elif m.group(5) is not None and m.group(2) is None:
                if m.group(5).strip():
                    raise ConfigError(
                        "ssl.principal.mapping.rules: expected DEFAULT or RULE:pattern/replacement/[LU], "
                        f"read {m.group(5).strip()!r}"
                    )
            else:
                try:
                    pattern = re.compile(m.group(2).replace("\\/", "/"))
                except re.error as e:
                    raise ConfigError(f"ssl.principal.mapping.rules: bad pattern {m.group(2)!r}: {e}") from None
                self.rules.append(_Rule(False, pattern, _java_replacement(m.group(3)), m.group(4)))
        if not self.rules:
            raise ConfigError(f"ssl.principal.mapping.rules: no rule in {rules!r}")

    def name(self, distinguished_name: str) -> str:
        """The short name of ``distinguished_name`` (NoMatchingRuleError if no rule matches)."""
        for rule in self.rules:
            out = rule.apply(distinguished_name)
            if out is not None:
                return out
        raise NoMatchingRuleError(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")


def distinguished_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate as Kafka prints it (``CN=alice,OU=eng,O=acme,C=US``)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()


class SslPrincipalBuilder:
    """Kafka's ``DefaultKafkaPrincipalBuilder`` for TLS: ``User:<mapped subject>`` of the client's
    certificate, ``User:ANONYMOUS`` without one.  Callable with the DER certificate or None."""

    def __init__(self, mapper: SslPrincipalMapper | None = None):
        self.mapper = mapper or SslPrincipalMapper()

    def __call__(self, der_certificate: bytes | None) -> KafkaPrincipal:
        if not der_certificate:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, self.mapper.name(distinguished_name(der_certificate)))
