"""The README's Spark snippet run as written against a real broker (plain ``python``, ``spark-submit``
in an activated virtualenv, and activated with no ``import pyklog``), Spark finding ``format("pyklog")``
with no registration call and no PYSPARK_PYTHON set.  The package's metadata, import names and console scripts
are checked without a server in tests/unit/packaging/test_packaging.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import clean_user_env

VENV_BIN = Path(sys.executable).parent


SNIPPET = textwrap.dedent("""
    import sys

    import pyklog  # noqa: F401  (Spark's Python workers then run this interpreter, which has pyklog)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    df = (spark.read.format("pyklog")
          .option("kafka.bootstrap.servers", sys.argv[1])
          .option("subscribe", sys.argv[2])
          .load())
    rows = df.selectExpr("CAST(value AS STRING) AS v").collect()
    print("ROWS", sorted(r.v for r in rows))
    spark.stop()
""")


@pytest.mark.parametrize("how", ["python", "spark-submit", "activated-no-import"])
def test_snippet_runs_as_written_without_registration(how, broker, tmp_path):
    """The README's snippet: no ``register()`` call and no PYSPARK_PYTHON.  Spark finds the data
    source (pyspark_pyklog) and its workers import it: run by the virtualenv's python from a shell
    where the system's ``python3`` comes first on PATH; under spark-submit with the virtualenv
    activated (its bin first on PATH), as the README says; and, activated, with no ``import pyklog``
    at all (discovery alone)."""
    from pyklog.connector.producer import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        p.send("snippet", f"v{i}".encode(), partition=0)
    p.flush()
    p.close()
    script = tmp_path / "app.py"
    script.write_text(SNIPPET if how != "activated-no-import" else SNIPPET.replace("import pyklog", "pass"))
    activated = clean_user_env(PATH=f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", VIRTUAL_ENV=str(VENV_BIN.parent))
    if how == "activated-no-import":
        cmd, env = [str(VENV_BIN / "python"), str(script)], activated
    elif how == "python":
        cmd, env = [sys.executable, str(script)], clean_user_env()
    else:
        cmd, env = [str(VENV_BIN / "spark-submit"), "--master", "local[2]", str(script)], activated
    r = subprocess.run(
        cmd + [broker.bootstrap, "snippet"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stderr[-4000:]
    assert "ROWS ['v0', 'v1', 'v2', 'v3', 'v4']" in r.stdout
