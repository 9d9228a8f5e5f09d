"""Kafka's ``sasl.jaas.config`` text: one JAAS login module entry.

``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_alice="alice-secret";`` -> :class:`JaasEntry` (login module class,
control flag, options).  Kafka's ``JaasConfig`` rules: exactly one module, a flag among required,
requisite, sufficient, optional; options ``name=value`` with the value quoted ("..." with \\" and
\\\\ escapes) or bare; a closing ``;``.  Errors (:class:`JaasError`) name what was expected and
never quote an option's value; ``repr`` hides every value.

Pure code.  Thread-safe (immutable values).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """Malformed JAAS text: says what was expected (never a value)."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"JaasEntry({self.login_module} {self.flag}, options={sorted(self.options)})"

    __str__ = __repr__

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options: name -> password."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def _tokens(text: str):
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            yield c, False
            i += 1
        elif c == '"':
            out = []
            i += 1
            while True:
                if i >= n:
                    raise JaasError("unterminated quoted value in the JAAS config")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    out.append(text[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    out.append(c)
                    i += 1
            yield "".join(out), True
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            yield text[i:j], False
            i = j


def parse_jaas_config(text: str) -> JaasEntry:
    """Parse one login module entry; JaasError when the text is not one."""
    toks = list(_tokens(text or ""))
    if not toks:
        raise JaasError("empty JAAS config: expected '<LoginModule class> required <name>=\"<value>\" ...;'")
    if toks[-1] != (";", False):
        raise JaasError("JAAS config entry must end with ';'")
    toks = toks[:-1]
    if any(t == (";", False) for t in toks):
        raise JaasError("JAAS config must contain exactly one login module entry")
    if len(toks) < 2 or toks[0][1] or toks[1][1]:
        raise JaasError("JAAS config must start with '<LoginModule class> <flag>'")
    module, flag = toks[0][0], toks[1][0].lower()
    if flag not in FLAGS:
        raise JaasError(f"JAAS config: invalid control flag {toks[1][0]!r} (expected one of {', '.join(FLAGS)})")
    options: dict[str, str] = {}
    rest = toks[2:]
    i = 0
    while i < len(rest):
        name, quoted = rest[i]
        if quoted or name in ("=", ";"):
            raise JaasError("JAAS config: expected an option name (<name>=<value>) after the flag")
        if i + 1 >= len(rest) or rest[i + 1] != ("=", False):
            raise JaasError(f"JAAS config: expected '=' after option {name!r}")
        if i + 2 >= len(rest) or (not rest[i + 2][1] and rest[i + 2][0] == "="):
            raise JaasError(f"JAAS config: option {name!r} has no value")
        options[name] = rest[i + 2][0]
        i += 3
    return JaasEntry(module, flag, options)


def jaas_text(login_module: str, options: dict[str, str]) -> str:
    """The JAAS text of one entry (values quoted and escaped)."""
    opts = " ".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in options.items()
    )
    return f"{login_module} required {opts};"
