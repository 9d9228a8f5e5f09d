"""A typed table of settings (Kafka's ``ConfigDef``).

Each key has a name, a :class:`Type`, a default (or :data:`REQUIRED`), an optional validator
(:class:`Range`, :class:`OneOf`), an :class:`Importance` and a doc string::

    CONFIG = (ConfigDef()
              .define("num.partitions", Type.INT, 1, Range(1, 1_000_000), Importance.MEDIUM,
                      "partitions of an auto-created topic")
              .define("broker.id", Type.INT, REQUIRED, Range(0, INT32_MAX), Importance.HIGH, "..."))
    values = CONFIG.parse(props)          # {"num.partitions": 1, "broker.id": 7}
    unknown = CONFIG.unknown_keys(props)  # the caller decides: the broker refuses, clients ignore

Coercion follows Kafka's ``ConfigDef.parseType``: a value may be given typed (``True``, ``5``) or as a
string, which is stripped first.  BOOLEAN: ``"true"``/``"false"`` in any case; INT (32-bit) and LONG
(64-bit): a decimal integer; DOUBLE: a decimal number; STRING: the stripped text; LIST: a
comma-separated string (items stripped, empty items dropped) or a list; PASSWORD: kept as a
:class:`Password` whose ``str``/``repr`` hide the value; ANY: a Python object taken as given (a
client's callables), checked only by its validator.  A bad value raises
:class:`pyklog.broker.errors.ConfigError` naming the key, what was expected and the value read
(``error_format`` lets each caller keep its wording).

Pure code; a :class:`ConfigDef` is built once at import time and is then only read, so it is safe
to share between threads (``define`` is not meant to be called concurrently with ``parse``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyklog.broker.errors import ConfigError

__all__ = [
    "ConfigDef",
    "ConfigKey",
    "Type",
    "Importance",
    "Range",
    "OneOf",
    "Password",
    "REQUIRED",
    "InvalidValue",
    "INT32_MAX",
    "INT32_MIN",
    "LONG_MAX",
    "LONG_MIN",
]

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a key that has none: :meth:`ConfigDef.parse` raises when it is not set."""


class Type(enum.Enum):
    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"
    ANY = "any"  # a Python object taken as given (a callable, a partitioner); validators still apply


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class Password:
    """A secret setting: ``str()`` and ``repr()`` print ``[hidden]``; :attr:`value` holds it."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__


_EXPECTED = {
    Type.BOOLEAN: "true or false",
    Type.INT: "an integer",
    Type.LONG: "an integer",
    Type.DOUBLE: "a number",
    Type.STRING: "a string",
    Type.LIST: "a comma-separated list",
    Type.PASSWORD: "a string",
    Type.ANY: "a value",
}

DEFAULT_ERROR_FORMAT = "{name}: expected {expected}, read {value!r}"


class InvalidValue(Exception):
    """Raised by coercion and validators (``InvalidValue(expected_text, value)``); turned into
    ConfigError by ConfigDef, which knows the key.  A custom validator is any callable
    ``(value, expected) -> None`` that raises this."""

    def __init__(self, expected: str, value: Any):
        super().__init__(expected)
        self.expected = expected
        self.value = value


@dataclasses.dataclass(frozen=True)
class Range:
    """``min <= value <= max`` (either bound may be None) for INT, LONG and DOUBLE keys."""

    min: float | None = None
    max: float | None = None

    def __call__(self, value: Any, expected: str) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise InvalidValue(f"{expected} >= {self.min}", value)
        if self.max is not None and value > self.max:
            raise InvalidValue(f"{expected} <= {self.max}", value)


@dataclasses.dataclass(frozen=True)
class OneOf:
    """The value (each item, for a LIST) is one of ``choices``; ``case_sensitive=False`` compares
    lower-cased and returns the canonical spelling of ``choices``."""

    choices: tuple
    case_sensitive: bool = True

    def __init__(self, *choices: Any, case_sensitive: bool = True):
        object.__setattr__(self, "choices", tuple(choices))
        object.__setattr__(self, "case_sensitive", case_sensitive)

    def __call__(self, value: Any, expected: str) -> None:
        if value is None:
            return
        for item in value if isinstance(value, list) else [value]:
            if self._canonical(item) is None:
                raise InvalidValue("one of " + ", ".join(str(c) for c in self.choices), item)

    def _canonical(self, item: Any) -> Any:
        for c in self.choices:
            if c == item or (not self.case_sensitive and isinstance(item, str) and str(c).lower() == item.lower()):
                return c
        return None


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    name: str
    type: Type
    default: Any = REQUIRED
    validator: Callable[[Any, str], None] | None = None
    importance: Importance = Importance.MEDIUM
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def coerce(type_: Type, value: Any) -> Any:
    """``value`` (typed or a string) as ``type_`` (no range check); ValueError with the expected form."""
    try:
        return _coerce(type_, value)
    except InvalidValue as e:
        raise ValueError(f"expected {e.expected}, read {value!r}") from None


def _coerce(t: Type, value: Any) -> Any:
    if value is None or t is Type.ANY:
        return value
    expected = _EXPECTED[t]
    if t is Type.BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            s = value.strip().lower()
            if s == "true":
                return True
            if s == "false":
                return False
        raise InvalidValue(expected, value)
    if t in (Type.INT, Type.LONG):
        if isinstance(value, bool):
            raise InvalidValue(expected, value)
        if isinstance(value, int):
            n = value
        elif isinstance(value, str):
            try:
                n = int(value.strip())
            except ValueError:
                raise InvalidValue(expected, value) from None
        else:
            raise InvalidValue(expected, value)
        return n
    if t is Type.DOUBLE:
        if isinstance(value, bool):
            raise InvalidValue(expected, value)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise InvalidValue(expected, value) from None
        raise InvalidValue(expected, value)
    if t is Type.STRING:
        if isinstance(value, str):
            return value.strip()
        raise InvalidValue(expected, value)
    if t is Type.LIST:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        if isinstance(value, (list, tuple)):
            return [str(p).strip() if isinstance(p, str) else p for p in value]
        raise InvalidValue(expected, value)
    if t is Type.PASSWORD:
        if isinstance(value, Password):
            return value
        if isinstance(value, str):
            return Password(value.strip())
        raise InvalidValue(expected, value)
    raise AssertionError(t)


class ConfigDef:
    """A table of :class:`ConfigKey`; see the module docstring.  Read-only after definition.

    ``error_format`` (``str.format`` with ``name``, ``expected``, ``value``) words the ConfigError;
    ``display`` maps a key's name to the spelling shown in errors; ``expected`` overrides the
    per-type "expected ..." texts (e.g. ``{Type.BOOLEAN: "'true' or 'false'"}``).
    """

    def __init__(
        self,
        *,
        error_format: str = DEFAULT_ERROR_FORMAT,
        display: Callable[[str], str] | None = None,
        expected: Mapping[Type, str] | None = None,
    ):
        self._keys: dict[str, ConfigKey] = {}
        self.error_format = error_format
        self._display = display or (lambda n: n)
        self._expected = {**_EXPECTED, **(expected or {})}

    def define(
        self,
        name: str,
        type: Type,
        default: Any = REQUIRED,
        validator: Callable[[Any, str], None] | None = None,
        importance: Importance = Importance.MEDIUM,
        doc: str = "",
    ) -> ConfigDef:
        """Add a key (``ValueError`` if already defined or the default does not pass); returns self."""
        if name in self._keys:
            raise ValueError(f"config key {name!r} is defined twice")
        key = ConfigKey(name, type, default, validator, importance, doc)
        if default is not REQUIRED:
            key = dataclasses.replace(key, default=self._value(key, default))
        self._keys[name] = key
        return self

    # ------------------------------------------------------------------ reading
    @property
    def keys(self) -> dict[str, ConfigKey]:
        return dict(self._keys)

    def names(self) -> frozenset[str]:
        return frozenset(self._keys)

    def __contains__(self, name: str) -> bool:
        return name in self._keys

    def unknown_keys(self, props: Mapping[str, Any] | Iterable[str]) -> list[str]:
        """The given keys this table does not define, sorted (each caller decides what to do)."""
        return sorted(str(k) for k in props if k not in self._keys)

    def parse(self, props: Mapping[str, Any]) -> dict[str, Any]:
        """Every defined key -> its typed value (the default when absent; ``None`` given = absent).

        Keys not defined here are skipped (see :meth:`unknown_keys`).  ConfigError names the key,
        the expected form and the value read; a required key not set: "<key>: required, not set".
        """
        return {name: self.parse_value(name, props.get(name)) for name in self._keys}

    def parse_value(self, name: str, raw: Any) -> Any:
        """One key's typed value from ``raw`` (None: the default, or ConfigError when required)."""
        key = self._keys[name]
        if raw is None:
            if key.required:
                doc = f" ({key.doc})" if key.doc else ""
                raise ConfigError(f"{self._display(name)}: required{doc}, not set")
            return key.default
        return self._value(key, raw)

    def _value(self, key: ConfigKey, raw: Any) -> Any:
        try:
            value = _coerce(key.type, raw)
            if key.validator is not None:
                value = self._validated(key.validator, key.type, value)
            if key.type in (Type.INT, Type.LONG) and value is not None:  # after the validator (finer wording)
                lo, hi = (INT32_MIN, INT32_MAX) if key.type is Type.INT else (LONG_MIN, LONG_MAX)
                if not lo <= value <= hi:
                    raise InvalidValue(f"an integer in [{lo}, {hi}]", value)
        except InvalidValue as e:
            expected = (
                self._expected[key.type]
                if e.expected == _EXPECTED[key.type]
                else e.expected.replace(_EXPECTED[key.type], self._expected[key.type], 1)
            )
            raise ConfigError(
                self.error_format.format(name=self._display(key.name), expected=expected, value=e.value)
            ) from None
        return value

    def _validated(self, validator: Callable[[Any, str], None], key_type: Type, value: Any) -> Any:
        validator(value, _EXPECTED[key_type])
        if isinstance(validator, OneOf) and not validator.case_sensitive and value is not None:
            if isinstance(value, list):
                return [validator._canonical(v) for v in value]
            return validator._canonical(value)
        return value

    def __repr__(self) -> str:
        return f"ConfigDef({', '.join(self._keys)})"
