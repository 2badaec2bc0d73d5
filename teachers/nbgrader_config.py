"""nbgrader configuration for the gpulab labs (copy next to your course folder, or point
``nbgrader --config`` at it). See teachers/README.md for the whole flow.

The lab sources are labs/solutions/*.ipynb: they already carry nbgrader's metadata (grade_id,
points, locked cells), ``### BEGIN/END SOLUTION`` regions and ``### BEGIN/END HIDDEN TESTS``
regions. Put each one in ``source/<lab>/<lab>.ipynb`` (``teachers/make_course.py`` does it).
"""

import os
import sys

try:  # the lab notebooks import gpulab, and so does the client below: refuse early without it
    import gpulab.grading.sliced  # noqa: F401
    from gpulab.grading.nbgrader_path import put_alembic_on_path
except ImportError as exc:
    sys.exit(
        f"nbgrader_config.py: gpulab cannot be imported by this Python ({sys.executable}: {exc}), so every "
        "lab would score 0. Install it where nbgrader runs: pip install -e 'PATH/TO/gpulab[grade]'"
    )

# nbgrader creates gradebook.db by running the `alembic` command found on PATH (nbgrader/api.py), so
# `.venv/bin/nbgrader ...` or `.venv/bin/python -m nbgrader ...` failed with FileNotFoundError: 'alembic'
# unless the venv was activated (or, after `pip install --user`, unless ~/.local/bin was on PATH). alembic is
# installed with nbgrader in this Python's scripts folder or the user one: put the one that has it first.
put_alembic_on_path()

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.root = os.environ.get("GPULAB_COURSE_DIR", os.path.dirname(os.path.abspath(__file__)))
c.CourseDirectory.course_id = os.environ.get("GPULAB_COURSE_ID", "gpulab")

# Test cells end with `report(result)`: the cell's value is the points earned, which nbgrader takes as
# partial credit; hidden tests are removed from the release and put back by autograde.
c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\nraise NotImplementedError("replace this line with your code")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Simulator mode runs every lab's checks in well under a minute per cell on one core; gpu mode is faster.
# A check that loops forever is interrupted, then the kernel is restarted.
c.Execute.timeout = int(os.environ.get("GPULAB_CELL_TIMEOUT", "300"))
c.Execute.interrupt_on_timeout = True
# Grade in the mode the server has: set GPULAB_DEVICE=gpu on a GPU node, simulator elsewhere.
os.environ.setdefault("GPULAB_DEVICE", "simulator")

# Feedback: nbgrader's HTML shows each cell's source, hidden tests included (nbgrader 0.9 does not strip
# them); ClearHiddenTests takes them out of the feedback as generate_assignment does for the release, and
# ShortTracebacks cuts a test cell's traceback (which quotes the code around the error) to its last line.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
    "gpulab.grading.feedback.ShortTracebacks",
]

# Students submit the notebook only; outputs are re-created by autograde.
c.Autograde.create_student = True
c.ClearOutput.enabled = True

# The exchange (JupyterHub): a folder shared by every student server and the grader's, see
# teachers/jupyterhub-config.yaml. Students fetch and submit from the Assignments tab.
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")

# nbclient (which autograde uses) sometimes waits a whole cell timeout for a reply that has already
# arrived (jupyter/nbclient#312); this client polls every second instead, so such a stall costs ~1 s. Autograde's
# kernels get it from gpulab's Execute (below); this line gives it to nbgrader's other kernels (validate).
c.AsyncKernelManager.client_class = "gpulab.grading.sliced.SlicedKernelClient"

# Kernels on unix sockets where there are (Linux, macOS). Over TCP, jupyter_client chooses a kernel's ports a second
# before the kernel binds them, and a kernel that another process starts in that second (autograde run for two labs
# at once, parallel tests) can be given the same ports: one of them dies with "ZMQError: Address already in use"
# (jupyter/jupyter_client#487) and the student's notebook is not graded. nbgrader's Execute fixes the kernel manager
# class, so gpulab's Execute takes its place: each kernel gets socket names of its own (gpulab.grading.ipc) and the
# client above (gpulab.grading.nbgrader_execute explains why a name set here for all kernels would not do).
from gpulab.grading.nbgrader_execute import autograde_preprocessors  # noqa: E402

c.Autograde.autograde_preprocessors = autograde_preprocessors()
