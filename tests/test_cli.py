"""The one command-line tree (gpulab.cli): names, help, --version, one error style, and a bad
GPULAB_DEVICE that must not break --help, --version or doctor (issues 15 and 16)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import pytest

from gpulab import __version__, _meta, cli
from gpulab.errors import UsageError, int_at_least


def gpulab(*args: str, device: str | None = "simulator", module: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GPULAB_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    if device is not None:
        env["GPULAB_DEVICE"] = device
    cmd = (
        [sys.executable, "-m", "gpulab", *args]
        if module
        else [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'gpulab'; from gpulab.cli import main; sys.exit(main())",
            *args,
        ]
    )
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)


def test_version_is_one_source():
    assert __version__ == _meta.VERSION
    r = gpulab("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gpulab {_meta.VERSION}"


def test_help_lists_every_command_with_the_right_program_name():
    r = gpulab("--help")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: python -m gpulab ")
    for name in cli.COMMANDS:
        assert name in r.stdout
    r = gpulab("--help", module=False)
    assert r.stdout.startswith("usage: gpulab "), r.stdout


def test_every_command_group_prints_its_help(capsys):
    """A group's --help lists its sub-commands' one-line help, a '%' in one included (argparse formats them)."""
    groups = [name for name, cmd in cli.COMMANDS.items() if cmd.sub]
    assert groups
    for name in groups:
        assert cli.main([name, "--help"], prog="gpulab") == 0, name
        out = capsys.readouterr().out
        assert all(sub in out for sub in cli.COMMANDS[name].sub), out
    assert "% of peak" in cli.COMMANDS["bench"].sub["kernels"].help  # the case that broke `bench --help`


@pytest.mark.parametrize("device", ["bogus", "gpu"])
def test_bad_device_does_not_break_help_version_or_doctor(device):
    if device == "gpu":
        from gpulab import runtime

        if runtime.probe_driver().found:
            pytest.skip("this machine has a GPU: GPULAB_DEVICE=gpu is valid here")
    for args in (["--help"], ["--version"], ["train", "--help"], ["notebooks", "--help"]):
        r = gpulab(*args, device=device)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)
    r = gpulab("doctor", "--no-fixes", device=device)
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout
    assert "mode: none" in r.stdout and "GPULAB_DEVICE" in r.stdout
    assert "doctor" not in r.stdout  # doctor must not tell the user to run doctor
    assert "numba-cuda:" in r.stdout  # the rest of the report is still there
    r = gpulab("bench", "kernels", "--list", device=device)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("python -m gpulab bench kernels: error: GPULAB_DEVICE")


def test_import_in_python_still_raises_for_a_bad_device():
    env = {**os.environ, "GPULAB_DEVICE": "bogus"}
    r = subprocess.run([sys.executable, "-c", "import gpulab"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and "ModeError" in r.stderr and "not a mode gpulab knows" in r.stderr


def test_argparse_errors_use_one_style():
    r = gpulab("notebooks", "frobnicate")
    assert r.returncode == 2 and "python -m gpulab notebooks: error: argument action: invalid choice" in r.stderr
    r = gpulab("bench")
    assert r.returncode == 2 and "error: the following arguments are required" in r.stderr


def _fake_module(monkeypatch, name, **attrs):
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


@pytest.fixture
def fake_command(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "fake", cli.Command("a fake command", "gpulab._fake_cmd", needs_mode=False))
    return monkeypatch


def test_configure_and_run_modules_get_defaults_in_help(fake_command, capsys):
    def configure(p: argparse.ArgumentParser) -> None:
        p.add_argument("--epochs", type=int_at_least(1), default=2, help="passes over the data")
        p.add_argument("--lr", type=float, default=1e-3, help="learning rate (default: %(default)s)")

    seen = {}
    _fake_module(fake_command, "gpulab._fake_cmd", configure=configure, run=lambda ns: seen.setdefault("ns", ns) and 0)
    with pytest.raises(SystemExit):
        cli.build_parser(["fake", "--help"], "gpulab").parse_args(["fake", "--help"])
    out = capsys.readouterr().out
    assert "passes over the data (default: 2)" in out and out.count("(default: 0.001)") == 1
    assert cli.main(["fake", "--epochs", "3"], prog="gpulab") == 0 and seen["ns"].epochs == 3
    assert cli.main(["fake", "--epochs", "0"], prog="gpulab") == 2
    assert "gpulab fake: error: argument --epochs: expected a whole number >= 1, got 0" in capsys.readouterr().err


def test_usage_errors_are_messages_and_debug_shows_the_traceback(fake_command, capsys):
    def run(ns):
        raise UsageError("out.json is in a folder that does not exist: /nope. Create it first.")

    _fake_module(fake_command, "gpulab._fake_cmd", configure=lambda p: None, run=run)
    assert cli.main(["fake"], prog="gpulab") == 2
    err = capsys.readouterr().err
    assert err == "gpulab fake: error: out.json is in a folder that does not exist: /nope. Create it first.\n"
    assert cli.main(["fake", "--debug"], prog="gpulab") == 2
    assert "Traceback" in capsys.readouterr().err


def test_unexpected_errors_have_no_traceback_without_debug(fake_command, capsys):
    _fake_module(fake_command, "gpulab._fake_cmd", configure=lambda p: None, run=lambda ns: 1 / 0)
    assert cli.main(["fake"], prog="gpulab") == 1
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "--debug" in err and "Traceback" not in err


def test_a_module_with_only_main_still_works(fake_command, capsys):
    got = {}
    _fake_module(fake_command, "gpulab._fake_cmd", main=lambda argv: got.setdefault("argv", argv) and 0)
    assert cli.main(["fake", "--x", "1", "pos"], prog="gpulab") == 0
    assert got["argv"] == ["--x", "1", "pos"]


def test_a_missing_command_module_is_explained(fake_command, capsys):
    assert cli.main(["fake"], prog="gpulab") == 2
    assert "has no `fake` command" in capsys.readouterr().err


def test_nested_bench_commands_are_in_the_tree(capsys):
    assert set(cli.COMMANDS["bench"].sub) == {"kernels", "lessons", "cnn"}
    assert cli.main(["bench", "kernels", "--list"], prog="gpulab") == 0
    assert "matmul_tiled" in capsys.readouterr().out


def test_bench_lessons_help_names_every_lesson_it_records_for():
    """The one-line help of `bench lessons` lists the lessons whose sections it records (results.SECTIONS)."""
    import re

    from gpulab.results import SECTIONS

    readers = {
        re.match(r"notebooks/(\d\d)_", r).group(1)
        for s in SECTIONS.values()
        if s.producer.startswith("python -m gpulab bench lessons")
        for r in s.readers
        if r.startswith("notebooks/")
    }
    named = set(re.findall(r"\b\d\d\b", cli.COMMANDS["bench"].sub["lessons"].help))
    assert named == readers, f"help names lessons {sorted(named)}, the recorded sections are read by {sorted(readers)}"


@pytest.mark.parametrize("bench", ["kernels", "lessons", "cnn"])
def test_bench_record_help_says_where_results_go(bench, capsys):
    """results.record writes to the user's data folder, never into the package's gpulab/results/."""
    assert cli.main(["bench", bench, "--help"], prog="gpulab") == 0
    text = " ".join(capsys.readouterr().out.split())
    record = text[text.index("--record") :]
    assert "user's recorded results" in record and "gpulab/results/" not in record
