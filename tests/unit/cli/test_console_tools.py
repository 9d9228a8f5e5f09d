"""pyklog-console-producer / pyklog-console-consumer as a user runs them (subprocesses)."""

from __future__ import annotations

import pytest

from pyklog.connector.cli.console_producer import LineReader


def test_line_reader_properties():
    r = LineReader({"parse.key": "true", "key.separator": ":"})
    assert r.parse("k:v:w", 1) == (b"k", b"v:w", ())
    with pytest.raises(ValueError, match="line 3: no key separator ':'"):
        r.parse("novalue", 3)
    r = LineReader({"parse.key": "true", "ignore.error": "true", "null.marker": "NULL"})
    assert r.parse("nokey", 1) == (None, b"nokey", ())
    assert r.parse("NULL\tNULL", 1) == (None, None, ())
    r = LineReader({"parse.headers": "true", "parse.key": "true"})
    assert r.parse("a:1,b:2\tk\tv", 1) == (b"k", b"v", (("a", b"1"), ("b", b"2")))
