"""``pytest -p gpu_emulation.plugin``: run the selected tests in emulated gpu mode (tests/gpu_emulation/emulate.py)."""

from gpu_emulation.emulate import activate

activate()
