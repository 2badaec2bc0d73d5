"""The student image turns nbgrader's teacher side off (binder/postBuild) and a teacher turns it back on
for their own account (teachers/README.md): checked against the nbgrader, jupyter_server and JupyterLab
installed here (nbgrader is in the test extra), by running postBuild's lines and the README's commands
with Jupyter's own code, in a throwaway environment prefix instead of this one."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
# What students keep: the assignment list (fetch, submit) and the validate button; nbgrader's menu only
# lists the commands of the plugins that are on.
STUDENT_SERVER = {"nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.validate_assignment"}
STUDENT_PLUGINS = {
    "@jupyter/nbgrader:assignment-list",
    "@jupyter/nbgrader:validate-assignment",
    "@jupyter/nbgrader:menu",
}
BLOCK_START, BLOCK_END = "# nbgrader's teacher side stays off", "# The solutions never reach the image"


def _post_build() -> str:
    return (BINDER / "postBuild").read_text(encoding="utf-8")


def _nbgrader_block() -> str:
    """postBuild's lines about nbgrader's extensions: from BLOCK_START to BLOCK_END."""
    text = _post_build()
    start, end = text.find(BLOCK_START), text.find(BLOCK_END)
    assert 0 <= start < end, f"postBuild has no block from {BLOCK_START!r} to {BLOCK_END!r}"
    return text[start:end]


def _commands(text: str, verb: str) -> list[list[str]]:
    """The arguments after ``jupyter VERB`` of each line that starts with it."""
    return [ln.split()[1 + len(verb.split()) :] for ln in text.splitlines() if ln.startswith(f"jupyter {verb} ")]


def _installed_server_extensions() -> set[str]:
    """The server extensions nbgrader's package enables in the environment it is installed in."""
    from importlib.metadata import distribution

    files = distribution("nbgrader").files or []
    conf = next((f for f in files if str(f).endswith("jupyter_server_config.d/nbgrader.json")), None)
    assert conf is not None, "nbgrader no longer installs etc/jupyter/jupyter_server_config.d/nbgrader.json"
    return set(json.loads(Path(conf.locate()).read_text())["ServerApp"]["jpserver_extensions"])


def _installed_labextension() -> Path:
    """Where installing nbgrader put its JupyterLab extension (share/jupyter/labextensions/...)."""
    from importlib.metadata import distribution

    files = distribution("nbgrader").files or []
    package = next((f for f in files if re.search(r"share/jupyter/labextensions/.*/package\.json$", str(f))), None)
    assert package is not None, "nbgrader no longer installs share/jupyter/labextensions/.../package.json"
    return Path(package.locate()).resolve().parent


def _installed_lab_plugins() -> set[str]:
    """The plugin ids in nbgrader's JupyterLab extension (its built JavaScript)."""
    spec = importlib.util.find_spec("nbgrader")
    assert spec and spec.origin
    labext = Path(spec.origin).parent / "labextension"
    name = json.loads((labext / "package.json").read_text())["name"]
    code = "".join(p.read_text(encoding="utf-8", errors="replace") for p in (labext / "static").glob("*.js"))
    return set(re.findall(rf'"({re.escape(name)}:[a-z-]+)"', code))


def test_postbuild_names_what_the_installed_nbgrader_has():
    pytest.importorskip("nbgrader", reason="nbgrader is in the test extra: pip install -e '.[test]'")
    block = _nbgrader_block()
    servers_off = {args[-1] for args in _commands(block, "server extension") if args[:2] == ["disable", "--sys-prefix"]}
    plugins_off = {a for args in _commands(block, "labextension") if args[0] == "disable" for a in args[2:]}
    unlocked = {a for args in _commands(block, "labextension") if args[0] == "unlock" for a in args[2:]}
    assert all(args[1] == "--level=sys_prefix" for args in _commands(block, "labextension")), block

    servers = _installed_server_extensions()
    assert servers_off <= servers, f"postBuild names server extensions nbgrader does not have: {servers_off - servers}"
    assert servers - servers_off == STUDENT_SERVER, "a new nbgrader extension: decide whether students get it"
    for module in servers:
        assert importlib.util.find_spec(module), module

    plugins = _installed_lab_plugins()
    assert plugins_off <= plugins, f"postBuild names plugins nbgrader does not have: {plugins_off - plugins}"
    assert plugins - plugins_off == STUDENT_PLUGINS, "a new nbgrader plugin: decide whether students get it"
    assert unlocked == plugins_off, "unlock what was disabled, or the teacher's user-level enable is refused"


# Runs `jupyter server extension ...` / `jupyter labextension ...` as their `jupyter` commands do, with
# sys.prefix (so --sys-prefix and --level=sys_prefix) moved to a throwaway prefix.
_JUPYTER = """
import os, sys
sys.prefix = sys.exec_prefix = os.environ["FAKE_PREFIX"]
args = sys.argv[1:]
if args[:2] == ["server", "extension"]:
    from jupyter_server.extension.serverextension import main
    sys.argv = ["jupyter-server-extension", *args[2:]]
elif args[:1] == ["labextension"]:
    from jupyterlab.labextensions import main
    sys.argv = ["jupyter-labextension", *args[1:]]
else:
    sys.exit(f"test: no jupyter {args}")
main()
"""

# What a server started in that prefix loads: ServerApp.find_server_extensions and the page config that
# JupyterLab and Notebook 7 send the browser (its disabledExtensions).
_STATE = """
import json, os, sys
sys.prefix = sys.exec_prefix = os.environ["FAKE_PREFIX"]
from jupyter_core.paths import jupyter_config_path
from jupyter_server.extension.config import ExtensionConfigManager
from jupyterlab_server.config import get_page_config
servers = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
print(json.dumps({"on": sorted(k for k, v in servers.items() if v and k.startswith("nbgrader")),
                  "disabled": sorted(get_page_config([], None)["disabledExtensions"])}))
"""


def _teacher_commands() -> str:
    """The fenced bash block in teachers/README.md that turns the teacher side on for one account."""
    readme = (ROOT / "teachers" / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- teacher-side-on -->\s*```bash\n(.*?)```", readme, re.S)
    assert found, "teachers/README.md: no ```bash block after <!-- teacher-side-on -->"
    return found.group(1)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """A prefix holding what installing nbgrader puts in etc/jupyter, after postBuild's block has run."""
    pytest.importorskip("nbgrader", reason="nbgrader is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("jupyterlab", reason="jupyterlab is in the lab extra")
    root = tmp_path_factory.mktemp("image")
    fake = root / "prefix"
    conf = fake / "etc" / "jupyter" / "jupyter_server_config.d"
    conf.mkdir(parents=True)
    (conf / "nbgrader.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": dict.fromkeys(sorted(_installed_server_extensions()), True)}})
    )
    labext = _installed_labextension()
    (fake / "share" / "jupyter" / "labextensions" / "@jupyter").mkdir(parents=True)
    (fake / "share" / "jupyter" / "labextensions" / "@jupyter" / labext.name).symlink_to(labext)
    (root / "jupyter.py").write_text(_JUPYTER)
    (root / "state.py").write_text(_STATE)
    proc = _bash(root, root / "build-home", _nbgrader_block(), prefer_env="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


def _env(root: Path, home: Path, prefer_env: str) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    return {**env, "HOME": str(home), "FAKE_PREFIX": str(root / "prefix"), "JUPYTER_PREFER_ENV_PATH": prefer_env}


def _bash(root: Path, home: Path, script: str, prefer_env: str) -> subprocess.CompletedProcess:
    shell = (
        f'set -euo pipefail\npython() {{ "{sys.executable}" "$@"; }}\n'
        f'jupyter() {{ "{sys.executable}" "{root / "jupyter.py"}" "$@"; }}\n{script}'
    )
    return subprocess.run(
        ["bash", "-c", shell], capture_output=True, text=True, timeout=600, env=_env(root, home, prefer_env)
    )


def _state(root: Path, home: Path, prefer_env: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(root / "state.py")],
        capture_output=True,
        text=True,
        check=True,
        env=_env(root, home, prefer_env),
    ).stdout
    return json.loads(out)


def _start_prefers_user_config() -> str:
    found = re.search(
        r'export JUPYTER_PREFER_ENV_PATH="\$\{JUPYTER_PREFER_ENV_PATH:-(\d)\}"', (BINDER / "start").read_text()
    )
    assert found, "binder/start sets JUPYTER_PREFER_ENV_PATH"
    return found.group(1)


TEACHER_PLUGINS = [
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
]


@pytest.mark.slow
@pytest.mark.parametrize("prefer_env", ["0", "1"])
def test_students_get_the_assignment_list_and_validate_only(prefix, tmp_path, prefer_env):
    state = _state(prefix, tmp_path / "student", prefer_env)
    assert state == {"on": sorted(STUDENT_SERVER), "disabled": TEACHER_PLUGINS}


@pytest.mark.slow
def test_a_teacher_turns_the_teacher_side_on_for_their_account(prefix, tmp_path):
    home, prefer_env = tmp_path / "teacher", _start_prefers_user_config()
    proc = _bash(prefix, home, _teacher_commands(), prefer_env)
    assert proc.returncode == 0 and "fail" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
    assert _state(prefix, home, prefer_env) == {"on": sorted(_installed_server_extensions()), "disabled": []}
    assert _state(prefix, tmp_path / "student", prefer_env)["disabled"] == TEACHER_PLUGINS, "students unchanged"
    # Why binder/start sets JUPYTER_PREFER_ENV_PATH=0: in the image's conda environment (which the notebook
    # user owns) jupyter_core would otherwise rank the environment's config above the teacher's.
    assert prefer_env == "0"
    assert _state(prefix, home, "1") == {"on": sorted(STUDENT_SERVER), "disabled": TEACHER_PLUGINS}


@pytest.mark.slow
@pytest.mark.parametrize("misspelt", ["server extension", "plugin"])
def test_postbuild_fails_when_a_name_is_wrong(prefix, tmp_path, misspelt):
    """A misspelt name passes the jupyter commands: `jupyter server extension disable` logs an error, writes
    nothing and exits 0 (jupyter_server 2); `jupyter labextension disable` disables any id, existing or not.
    postBuild's check is what fails the build."""
    shutil.copytree(prefix / "prefix", tmp_path / "prefix", symlinks=True)
    for name in ("jupyter.py", "state.py"):
        shutil.copy(prefix / name, tmp_path / name)
    block = _nbgrader_block()
    check = block[block.index("# Those commands only log") :]
    etc = tmp_path / "prefix" / "etc" / "jupyter"
    if misspelt == "server extension":  # the formgrader's disable left nothing
        (etc / "jupyter_server_config.d" / "nbgrader.server_extensions.formgrader.json").unlink()
        expected = "formgrader is not off"
    else:  # create-assignments disabled (and checked) instead of create-assignment
        page_config = json.loads((etc / "labconfig" / "page_config.json").read_text())
        page_config["disabledExtensions"]["@jupyter/nbgrader:create-assignments"] = True
        (etc / "labconfig" / "page_config.json").write_text(json.dumps(page_config))
        check = check.replace(" create-assignment;", " create-assignments;")
        expected = "has no plugin @jupyter/nbgrader:create-assignments"
    proc = _bash(tmp_path, tmp_path / "build-home", check, prefer_env="1")
    assert proc.returncode == 1 and expected in proc.stderr, proc.stderr[-2000:]
