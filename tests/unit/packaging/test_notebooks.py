"""Execute every notebook in notebooks/ with nbclient, in a kernel running this interpreter (the
project's virtualenv): a kernel spec is written to a temporary JUPYTER_PATH so no user-level Jupyter
setup is needed.  A cell that raises fails the test with the cell's traceback.

Each execution gets its own marker in the kernel's environment (``PYKLOG_NOTEBOOK_RUN``), which every
process the notebook starts inherits (ZooKeeper, the broker, Spark's JVM and its Python workers).
After the kernel has shut down no process may still carry the marker: the notebooks stop what they
started in their last cell and, when a cell fails, at the kernel's exit (``atexit``).  A process left
over is killed and fails the test.  ``test_failing_cell_leaves_no_process`` runs the quickstart up to
a running query and then fails a cell on purpose.

Spark gives a Python worker 10 s (not configurable) to connect back after it is started; on a machine
loaded far beyond its cores a query's planner can miss that, and the query fails with "Python worker
failed to connect back".  That one error re-executes the notebook once.
"""

from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/*.ipynb"
