"""The supported-versions table in docs/ is the one the protocol module renders.

Every Markdown file under docs/ that holds the ``supported-versions`` markers is checked, and the
architecture doc must be one of them.  After a change to SUPPORTED or FLEXIBLE, regenerate it:
``python -m pyklog.broker.protocol.versions_doc --write docs/<file>.md``.  No server needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyklog.broker.protocol import FLEXIBLE, SUPPORTED, ApiKey
from pyklog.broker.protocol.versions_doc import BEGIN, END, extract_table, main, render_table, replace_table

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _docs_with_table() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if BEGIN in p.read_text(encoding="utf-8"))


def test_architecture_doc_holds_the_table():
    names = [p.name for p in _docs_with_table()]
    assert any(n.startswith("ARCHITECTURE") for n in names), names


@pytest.mark.parametrize("doc", _docs_with_table(), ids=lambda p: p.name)
def test_doc_table_equals_generated(doc):
    assert extract_table(doc.read_text(encoding="utf-8")) == render_table(), (
        f"{doc} is out of date: python -m pyklog.broker.protocol.versions_doc --write {doc}"
    )


def test_one_row_per_supported_api_in_key_order():
    rows = [line for line in render_table().splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == sorted(int(k) for k in SUPPORTED)
    assert len(rows) == len(SUPPORTED)


def test_row_contents():
    table = render_table()
    lo, hi = SUPPORTED[ApiKey.FETCH]
    assert f"| 1 | Fetch | {lo} | {hi} | {FLEXIBLE[ApiKey.FETCH]} |" in table.splitlines()
    # an API that is never flexible shows a dash
    table = render_table({47: (0, 0)}, {})
    assert "| 47 | OffsetDelete | 0 | 0 | - |" in table.splitlines()
    assert "1 APIs." in table


def test_extract_and_replace_round_trip():
    doc = f"# title\n\n{BEGIN}\nold table\n{END}\n\nafter\n"
    new = replace_table(doc, render_table())
    assert extract_table(new) == render_table()
    assert new.startswith(f"# title\n\n{BEGIN}\n") and new.endswith(f"{END}\n\nafter\n")
    assert replace_table(new, render_table()) == new


@pytest.mark.parametrize("doc, missing", [("no markers", BEGIN), (f"{BEGIN}\nno end", END)])
def test_missing_marker_is_named(doc, missing):
    with pytest.raises(ValueError, match=missing):
        extract_table(doc)


def test_main_prints_and_writes(tmp_path, capsys):
    assert main([]) == 0
    assert capsys.readouterr().out == render_table()
    f = tmp_path / "doc.md"
    f.write_text(f"{BEGIN}\n{END}\n", encoding="utf-8")
    assert main(["--write", str(f)]) == 0
    assert extract_table(f.read_text(encoding="utf-8")) == render_table()
