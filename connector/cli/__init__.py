"""Command-line tools of the connector: console producer / consumer (and consumer groups)."""
from __future__ import annotations

__all__ = ["parse_properties"]


def parse_properties(items, option: str = "--property") -> dict[str, str]:
    """``["a=1", "b.c=x=y"]`` -> ``{"a": "1", "b.c": "x=y"}``; a missing ``=`` is an error."""
    out: dict[str, str] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise SystemExit(f"{option}: expected key=value, got {item!r}")
        out[k.strip()] = v
    return out


def unescape(s: str) -> str:
    r"""Interpret ``\t``, ``\n``, ``\\`` in separator properties as Kafka's tools do."""
    return s.encode("utf-8").decode("unicode_escape") if "\\" in s else s
