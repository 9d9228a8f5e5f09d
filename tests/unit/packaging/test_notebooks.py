"""The notebooks/ directory holds notebooks (no server, no kernel).  Executing each of them in a
kernel, with the check that no process is left over, is tests/integration/notebooks/test_notebooks.py."""

from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/*.ipynb"
