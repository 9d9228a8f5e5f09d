"""The installed package without a server: one import name (``pyklog``), nothing named ``broker`` or
``connector`` importable, version and metadata, setup.cfg listing every package, ``--version`` on every
console script, light imports, PYSPARK_PYTHON set on import only when unset, and the worker-python check
naming what to set.  The README's Spark snippet run as written against a broker is in
tests/integration/packaging/test_snippets.py; the import directions between the layers in
tests/unit/test_import_directions.py."""

from __future__ import annotations

import configparser
import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys
from pathlib import Path

import pyklog
from tests.support import clean_user_env

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent


def _all_modules() -> list[str]:
    import pyklog.broker
    import pyklog.connector

    names = ["pyklog"]
    for pkg in (pyklog.broker, pyklog.connector):
        names.append(pkg.__name__)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    return names


def test_version_and_metadata():
    meta = importlib.metadata.metadata("pyklog")
    assert pyklog.__version__ == importlib.metadata.version("pyklog") == meta["Version"]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License"] == "Apache-2.0" and meta["Summary"] and meta["Home-page"]
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Documentation", "Source", "Issues"}
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")
    requires = {r.split(";")[0].replace(" ", "") for r in meta.get_all("Requires-Dist")}
    assert "pandas<3,>=2.2" in requires  # pyspark 4.3 warns in every session under pandas 3


def test_every_module_imports_under_pyklog_and_no_bare_names():
    for name in _all_modules():
        importlib.import_module(name)
    assert "broker" not in sys.modules and "connector" not in sys.modules
    bare = [m for m in sys.modules if m.split(".")[0] in ("broker", "connector")]
    assert bare == []


def test_bare_names_are_not_importable_after_install(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; "
            "print(u.find_spec('broker'), u.find_spec('connector'), u.find_spec('pyklog.broker') is not None)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_user_env(),
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "None", "True"]


def test_setup_cfg_lists_every_package():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    listed = {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}
    on_disk = {"pyklog"}
    for top in ("broker", "connector"):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO).parts
            on_disk.add(".".join(("pyklog",) + rel))
    assert listed == on_disk


def test_every_console_script_has_version():
    scripts = [
        ep.name for ep in importlib.metadata.entry_points(group="console_scripts") if ep.value.startswith("pyklog.")
    ]
    assert len(scripts) >= 6
    for name in scripts:
        r = subprocess.run([str(VENV_BIN / name), "--version"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout.strip() == f"{name} (pyklog {pyklog.__version__})"


def test_light_imports():
    """``import pyklog`` and ``import pyklog.connector`` import neither pyspark nor the broker's server."""
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pyklog, pyklog.connector, pyklog.connector.producer; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark' "
            "or m.startswith('pyklog.broker.server')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_user_env(),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_import_sets_pyspark_python_only_when_unset():
    code = "import os, sys, pyklog; print(os.environ.get('PYSPARK_PYTHON') == sys.executable)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=clean_user_env())
    assert r.stdout.strip() == "True", r.stderr
    r = subprocess.run(
        [sys.executable, "-c", "import os, pyklog; print(os.environ['PYSPARK_PYTHON'])"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_user_env(PYSPARK_PYTHON="/opt/mine/python"),
    )
    assert r.stdout.strip() == "/opt/mine/python", r.stderr
    # under spark-submit / the pyspark shell the JVM came first: the deployment's choice stands
    r = subprocess.run(
        [sys.executable, "-c", "import os, pyklog; print(os.environ.get('PYSPARK_PYTHON'))"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_user_env(PYSPARK_GATEWAY_PORT="1"),
    )
    assert r.stdout.strip() == "None", r.stderr


def test_worker_python_check_names_what_to_set():
    from pyklog.connector.spark.registration import worker_python_problem

    assert worker_python_problem(sys.executable) is None
    problem = worker_python_problem("/usr/bin/python3")
    assert problem is not None and "cannot import pyklog" in problem
    assert "cannot run" in worker_python_problem("/nonexistent/python")
