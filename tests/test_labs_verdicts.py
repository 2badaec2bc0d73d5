"""What a learner sees in a lab's check cell when the answer is wrong: the harness's verdict (which input,
which index, the named mistake), never only a traceback from a later assertion in the same cell."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from gpulab import labs
from nbrun import SlicedClient

ROOT = Path(__file__).resolve().parents[1]

RELU_TIMES_Y = "    i = cuda.grid(1)\n    if i < dx.size:\n        dx[i] = dout[i] * y[i]"  # leaky ReLU backward, wrong


def _run_until(nb: nbformat.NotebookNode, marker: str) -> nbformat.NotebookNode:
    """Execute the notebook's cells up to the first cell containing ``marker``; return that cell."""
    stop = next(k for k, c in enumerate(nb.cells) if marker in c.source)
    nb.cells = [c for c in nb.cells[: stop + 1] if "colab-setup" not in c.metadata.get("tags", [])]
    SlicedClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return nb.cells[-1]


def _text(cell: nbformat.NotebookNode) -> tuple[str, list[str]]:
    text, errors = [], []
    for out in cell.outputs:
        if out.output_type == "stream":
            text.append(out.text)
        elif out.output_type == "error":
            errors.append(f"{out.ename}: {out.evalue}")
        else:
            text.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(text), errors


@pytest.mark.slow
def test_lab08_wrong_kernel_shows_the_verdict_not_a_gradcheck_traceback():
    """Before: the finite-difference assertion ran before report(), so a wrong ReLU backward ended the cell
    with 'AssertionError: the gradient of x disagrees with finite differences' and the named mistake
    ('multiplied by y') was never shown."""
    nb = nbformat.read(str(ROOT / "labs" / "student" / "lab08_backprop.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if "def leaky_relu_backward_kernel" in c.source)
    cell.source = cell.source.replace(f"    # YOUR CODE HERE\n    {labs.CODE_STUB}", RELU_TIMES_Y)
    assert RELU_TIMES_Y in cell.source
    text, errors = _text(_run_until(nb, "LEAKY_RELU_BACKWARD.check("))
    assert not errors, errors
    assert "[FAIL] leaky_relu_backward_kernel" in text and "multiplied by y" in text, text
    assert "Finite differences are checked once the verdict below is a pass" in text


@pytest.mark.slow
def test_lab08_stub_shows_not_implemented_without_a_traceback():
    nb = nbformat.read(str(ROOT / "labs" / "student" / "lab08_backprop.ipynb"), as_version=4)
    text, errors = _text(_run_until(nb, "MAXPOOL_BACKWARD.check("))
    assert not errors, errors
    assert "not implemented yet" in text, text
