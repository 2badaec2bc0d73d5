"""Command line: ``python -m gpulab doctor | train | bench | labs ...``.

Each command lives in its own module with a ``main(argv) -> int``; it is imported only when used.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "doctor": ("gpulab.doctor", "check the installation, the mode and the GPU; print known fixes"),
    "train": ("gpulab.train", "train the lab's CNN on MNIST / Fashion-MNIST / digits"),
    "bench": ("gpulab.bench", "benchmark kernels or the CNN (optionally against PyTorch)"),
    "labs": ("gpulab.labs", "release student versions of the labs, or grade a submission"),
    "notebooks": ("gpulab.nbtools", "sync or check every notebook's Colab badge, setup cell and metadata"),
}


def usage() -> str:
    lines = ["usage: python -m gpulab COMMAND [options]", "", "commands:"]
    width = max(map(len, COMMANDS))
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `python -m gpulab COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"gpulab: unknown command {name!r}.\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
