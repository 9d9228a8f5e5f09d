"""Execute every notebook in notebooks/ with nbclient, in a kernel running this interpreter (the
project's virtualenv): a kernel spec is written to a temporary JUPYTER_PATH so no user-level Jupyter
setup is needed.  A cell that raises fails the test with the cell's traceback."""
from __future__ import annotations

import glob
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
KERNEL = "pyklog-test-venv"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory, monkeypatch_module):
    base = tmp_path_factory.mktemp("jupyter")
    spec_dir = base / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pyklog test venv", "language": "python",
        "env": {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    }))
    monkeypatch_module.setenv("JUPYTER_PATH", str(base))
    monkeypatch_module.setenv("JUPYTER_PLATFORM_DIRS", "1")
    return KERNEL


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/*.ipynb"


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_name):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=kernel_name, timeout=300, startup_timeout=120,
                            resources={"metadata": {"path": os.path.dirname(path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {}) for o in outputs), \
        "the notebook shows a plot"
