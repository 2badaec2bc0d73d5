"""The one command-line tree: ``gpulab COMMAND ...`` (or ``python -m gpulab COMMAND ...``).

Each command lives in its own module, imported only when that command runs. A module provides
``configure(parser)`` (adds its arguments to the sub-parser it is given) and ``run(ns) -> int``
(does the work, raises :class:`gpulab.errors.UsageError` for bad input, never exits). A module
that has only the older ``main(argv) -> int`` still works: its arguments are handed to ``main``.

Errors have one style: ``gpulab CMD: error: <what is wrong, what was given, what to do>``, exit
code 2, no traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from collections.abc import Sequence

from . import _meta, runtime
from .errors import GpulabError

__all__ = ["COMMANDS", "Command", "build_parser", "main", "prog_name"]


@dataclass(frozen=True)
class Command:
    """One command: the module that implements it (or sub-commands), a one-line help."""

    help: str
    module: str | None = None
    needs_mode: bool = True  # choose gpu/simulator before running (a bad GPULAB_DEVICE is reported)
    sub: dict[str, Command] = field(default_factory=dict)


COMMANDS: dict[str, Command] = {
    "doctor": Command(
        "check the installation, the mode and the GPU; print known fixes", "gpulab.doctor", needs_mode=False
    ),
    "course": Command(
        "copy the lessons and labs into a folder, ready for `jupyter lab`", "gpulab.course", needs_mode=False
    ),
    "train": Command("train the lab's CNN on MNIST / Fashion-MNIST / digits", "gpulab.train"),
    "bench": Command(
        "benchmark kernels, the lessons' GPU figures or the CNN",
        sub={
            "kernels": Command(
                "each reference kernel's GB/s or GFLOP/s, % of peak and of CuPy/cuBLAS", "gpulab.bench.kernels"
            ),
            "lessons": Command(
                "the GPU figures lessons 00, 02, 06, 07, 09, 11 and 12 show from a recording",
                "gpulab.bench.lessons",
            ),
            "cnn": Command("CNN training throughput (images/s), optionally against PyTorch", "gpulab.bench.cnn"),
        },
    ),
    "labs": Command("release or check the student labs, or grade a submission", "gpulab.labs", needs_mode=False),
    "lessons": Command("release or check the learner versions of the lessons", "gpulab.lessons", needs_mode=False),
    "notebooks": Command(
        "sync or check every notebook's Colab badge, setup cell and metadata; execute them again in place",
        "gpulab.nbtools",
        needs_mode=False,
    ),
    "gpu-check": Command(
        "on a CUDA machine: notebooks in gpu mode and benchmarks, recorded", "gpulab.gpucheck", needs_mode=False
    ),
}


def prog_name(argv0: str | None = None) -> str:
    """``python -m gpulab`` when started that way, else ``gpulab`` (the console script)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    return "python -m gpulab" if os.path.basename(argv0 or "") in ("__main__.py", "-m", "-c") else "gpulab"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` after every option that has a default and does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "%(default)" in text
            or "default:" in text
            or action.default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose sub-parsers share the formatter and the one error style."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def _load(name: str, module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # a missing dependency of the module: a real problem, say which
            raise GpulabError(
                f"the `{name}` command needs the package {exc.name!r}, which is not installed. "
                f"Install it (pip install {exc.name}) or the matching gpulab extra, then try again."
            ) from exc
        raise GpulabError(
            f"this gpulab installation has no `{name}` command (module {module} is missing). "
            f'Reinstall gpulab (pip install --force-reinstall --no-deps "gpulab @ git+{_meta.REPO_URL}"), '
            "or run it from a checkout of the repository."
        ) from exc


def _add_command(sub: Any, name: str, cmd: Command, chosen: list[str], path: tuple[str, ...]) -> None:
    """Add ``name`` to ``sub``; configure it fully only when it is the command being run."""
    module = None
    if chosen[:1] == [name] and cmd.module is not None and not cmd.sub:
        module = _load(" ".join(path + (name,)), cmd.module)
    modern = module is not None and hasattr(module, "configure") and hasattr(module, "run")
    # An older module (main(argv) only) parses the rest of the line itself, --help included.
    # argparse %-formats help strings ("% of peak" would be read as a format): escape the percent signs.
    p = sub.add_parser(name, help=cmd.help.replace("%", "%%"), description=cmd.help, add_help=module is None or modern)
    p.set_defaults(_command=path + (name,), _spec=cmd)
    if cmd.sub:
        inner = p.add_subparsers(
            dest=f"_sub_{len(path)}", metavar="{" + ",".join(cmd.sub) + "}", required=True, parser_class=Parser
        )
        for sub_name, sub_cmd in cmd.sub.items():
            _add_command(inner, sub_name, sub_cmd, chosen[1:] if chosen[:1] == [name] else [], path + (name,))
        return
    if module is None:
        return
    if modern:
        module.configure(p)
        p.set_defaults(_run=module.run)
    elif hasattr(module, "main"):
        p.set_defaults(_main=module.main)
    else:
        raise GpulabError(
            f"module {cmd.module} has neither configure()/run() nor main(): "
            "this gpulab installation is broken; reinstall it."
        )


def _chosen(argv: Sequence[str]) -> list[str]:
    """The command words at the start of ``argv`` (after global options), e.g. ``['bench', 'cnn']``."""
    words = [a for a in argv if not a.startswith("-")]
    out: list[str] = []
    table = COMMANDS
    for w in words:
        if w not in table:
            break
        out.append(w)
        table = table[w].sub
        if not table:
            break
    return out


def build_parser(argv: Sequence[str] = (), prog: str | None = None) -> argparse.ArgumentParser:
    """The whole tree; the command named in ``argv`` (if any) gets its module's arguments."""
    parser = Parser(
        prog=prog or prog_name(),
        description=(
            "gpulab: learn why GPUs matter for deep learning by writing CUDA kernels in Python.\n"
            "Run `%(prog)s COMMAND --help` for a command's options."
        ),
    )
    parser.add_argument("--version", action="version", version=f"gpulab {_meta.VERSION}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback when a command fails")
    sub = parser.add_subparsers(dest="_top", metavar="COMMAND", title="commands", parser_class=Parser)
    chosen = _chosen(argv)
    for name, cmd in COMMANDS.items():
        _add_command(sub, name, cmd, chosen, ())
    return parser


def _report(prog: str, exc: BaseException, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if isinstance(exc, (GpulabError, runtime.ModeError)):
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{prog}: error: {type(exc).__name__}: {exc}\n(an unexpected failure; run again with --debug for the "
        "traceback and report it)",
        file=sys.stderr,
    )
    return 1


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run one command; returns the exit code (the console script and ``python -m gpulab`` exit with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    debug = "--debug" in args[:cut]
    if debug:
        args = [a for k, a in enumerate(args) if not (a == "--debug" and k < cut)]
    prog = prog or prog_name()
    where = prog
    try:
        spec_words = _chosen(args)
        if spec_words:
            where = f"{prog} {' '.join(spec_words)}"
            cmd = COMMANDS[spec_words[0]]
            for w in spec_words[1:]:
                cmd = cmd.sub[w]
            wants_help = any(a in ("-h", "--help") for a in args[:cut])
            if cmd.needs_mode and not cmd.sub and not wants_help:
                runtime.mode()  # a bad GPULAB_DEVICE is reported here, before the command is imported
        parser = build_parser(args, prog)
        if not args:
            parser.print_help()
            return 0
        ns, extra = parser.parse_known_args(args)
        if extra and not hasattr(ns, "_main"):
            parser.parse_args(args)  # reports the unrecognized arguments in argparse's words (exit 2)
        spec: Command | None = getattr(ns, "_spec", None)
        if spec is None:
            parser.print_help()
            return 0
        where = f"{prog} {' '.join(ns._command)}"
        if hasattr(ns, "_run"):
            return int(ns._run(ns) or 0)
        return int(ns._main(extra) or 0)
    except BrokenPipeError:  # output piped into `head`: stop quietly
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - python flushes stdout at exit
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse (exit 2 after its message) or an older module's main
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else _say(where, exc.code))
    except Exception as exc:  # noqa: BLE001 - every failure becomes one message; --debug shows the rest
        return _report(where, exc, debug)


def _say(where: str, message: object) -> int:
    print(f"{where}: error: {message}", file=sys.stderr)
    return 2
