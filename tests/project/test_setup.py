"""Set-up as a user meets it: the `board` extra as pip installs it, the system check in tests/run.sh, and an active
virtual environment left as it is."""

import ast
import email
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rl_board.reading.workers import WORKERS
from tests.support import PROJECT
from tests.support.browser import free_port, serves


@pytest.fixture(scope="module")
def metadata(tmp_path_factory):
    """The project's metadata as pip gets it: setuptools' build backend run on pyproject.toml, in the project."""
    out = tmp_path_factory.mktemp("metadata")
    build = "import sys, setuptools.build_meta as b; print(b.prepare_metadata_for_build_wheel(sys.argv[1]))"
    name = subprocess.run([sys.executable, "-c", build, str(out)], cwd=PROJECT, check=True, capture_output=True, text=True).stdout.split()[-1]
    return email.message_from_string((out / name / "METADATA").read_text())


def extra_requirements(metadata, extra):
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist")]
    return [r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": extra})]


def board_imports():
    """Top-level modules the page (rl_logging_board.py) and the engine (rl_board/) import, wherever in a file, but the
    project's own."""
    names = set()
    for path in [PROJECT / "rl_logging_board.py", *(PROJECT / "rl_board").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names - {"rl_board", "rollout_logger"}


def test_board_extra_installs_every_module_the_board_imports(metadata):
    """The `board` extra, and for `python -m rl_board index --dask` alone (which imports them only then) the `dask` one."""
    board = {canonicalize_name(r.name) for r in extra_requirements(metadata, "board") + extra_requirements(metadata, "dask")}
    provided_by = importlib.metadata.packages_distributions()
    third_party = sorted(name for name in board_imports() if name not in sys.stdlib_module_names)
    assert third_party, "no third-party imports found: the parse is wrong"
    for module in third_party:
        distributions = {canonicalize_name(d) for d in provided_by.get(module, [])}
        assert distributions, f"the board imports {module}, which no installed distribution provides"
        assert distributions & board, f"`pip install .[board]` does not install {module} (from {sorted(distributions)})"


def test_board_extra_is_requirements_txt(metadata):
    """start.sh installs requirements.txt, `pip install .[board]` the extra: the same packages, the same ranges."""
    lines = [line.split("#")[0].strip() for line in (PROJECT / "requirements.txt").read_text().splitlines()]
    listed = sorted(str(Requirement(line)) for line in lines if line)
    board = sorted(str(Requirement(f"{r.name}{r.specifier}")) for r in extra_requirements(metadata, "board"))
    assert board == listed


def test_run_sh_finds_installed_chromium_and_fonts_every_time():
    """The check that decides whether tests/run.sh calls apt-get, run as run.sh runs it (pipefail) 50 times:
    with everything installed it must never report a package missing (a `fc-list | grep -q` did about half
    the time)."""
    fonts = subprocess.run(["fc-list", ":", "family"], capture_output=True, text=True).stdout.lower() if shutil.which("fc-list") else ""
    if not (Path("/usr/bin/chromium").exists() and "noto sans cjk" in fonts and "noto color emoji" in fonts):
        pytest.skip("Chromium or a font is not installed here")
    script = (PROJECT / "tests" / "run.sh").read_text()
    function = script[script.index("missing_system_packages() {") :]
    function = function[: function.index("\n}\n") + 3]
    check = f"set -euo pipefail\n{function}for _ in $(seq 50); do missing_system_packages; done\n"
    result = subprocess.run(["bash", "-c", check], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("markexpr", "marker", "deselected"),
    [
        ("not browser and not training and not slow", "browser", True),
        ("not browser and not training", "training", True),
        ("not (browser or training)", "browser", True),
        ("slow and not browser", "browser", True),
        ("not browser", "training", False),
        ("browser or slow", "training", False),
        ("not browser or training", "browser", False),
        ("training", "browser", False),  # a browser test that is also marked training is chosen
        ("", "browser", False),
        ("not browser(x)", "browser", False),  # a marker with arguments: never assumed
    ],
)
def test_a_file_is_skipped_only_when_m_deselects_every_test_of_its_marker(markexpr, marker, deselected):
    """conftest.py leaves unimported the files whose marker `-m` rules out for any other markers a test may have."""
    from tests.conftest import deselects_every_test_marked

    assert deselects_every_test_marked(markexpr, marker) is deselected


# A user's training environment is active while they run the tests or the board: neither script may install into it
# (tests/run.sh would replace its torch with the pinned CPU wheel). Both run in the project's .venv, and say so.
@pytest.mark.skipif(Path(sys.prefix).resolve() != (PROJECT / ".venv").resolve(), reason="runs tests/run.sh and start.sh, which use the project's .venv: only when the tests run in it (as tests/run.sh runs them)")
def test_run_sh_and_start_sh_leave_an_active_environment_as_it_is(tmp_path):
    active = tmp_path / "training_env"
    (active / "bin").mkdir(parents=True)
    (active / "bin" / "python").write_text("#!/bin/sh\necho 'the active environment was used' >&2\nexit 3\n")
    (active / "bin" / "python").chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "RL_LOGGING_BOARD_PYTHON")}
    env |= {"VIRTUAL_ENV": str(active), "PATH": f"{active / 'bin'}:{env['PATH']}"}
    tests = subprocess.run(["bash", "tests/run.sh", "--collect-only", "-q", "tests/project/test_layers.py"], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0, tests.stderr[-2000:]
    assert f"not in the active {active}, which is left as it is" in tests.stderr and "the active environment was used" not in tests.stderr
    port = free_port()
    board = subprocess.Popen(["bash", "start.sh", str(port)], cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert serves(f"http://127.0.0.1:{port}"), "start.sh did not serve the board"
    finally:
        os.killpg(board.pid, signal.SIGKILL)  # the server and anything it started
        _, stderr = board.communicate(timeout=60)
    assert f"not in the active {active}, which is left as it is" in stderr and "the active environment was used" not in stderr
    assert sorted(path.name for path in active.rglob("*")) == ["bin", "python"]  # nothing installed or written there


# start.sh has the server import the page's libraries and start the worker processes before it serves: before any
# page has opened, the server process holds pyarrow and numpy, and its workers run (one core: none, as the page does).
# The page module imported outside a session leaves no warning in the log.
def test_start_sh_prepares_the_server_before_the_first_page(tmp_path):
    port = free_port()
    env = dict(os.environ, RL_LOGGING_BOARD_CACHE=str(tmp_path / "cache"), RL_LOGGING_BOARD_PYTHON=sys.executable)
    board = subprocess.Popen(["bash", "start.sh", str(port), str(tmp_path)], cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert serves(f"http://127.0.0.1:{port}"), "start.sh did not serve the board"
        libraries = Path(f"/proc/{board.pid}/maps").read_text()
        assert "libarrow" in libraries and "numpy" in libraries
        expected = WORKERS if WORKERS > 1 else 0
        for _ in range(120):
            workers = subprocess.run(["pgrep", "-P", str(board.pid)], capture_output=True, text=True).stdout.split()
            if len(workers) >= expected:
                break
            time.sleep(0.5)
        assert len(workers) >= expected
    finally:
        os.killpg(board.pid, signal.SIGKILL)
        log, _ = board.communicate(timeout=60)
    assert "You can now view your Streamlit app" in log
    assert "WARNING" not in log and "Traceback" not in log, log


# A stand-in for the board's Python that writes the arguments start.sh runs it with, one a line, and exits.
ARGUMENTS_WRITTEN = "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$ARGUMENTS_FILE\"\n"


@pytest.mark.parametrize("arguments, page_options", [
    (["8123", "{root}"], ["--root", "{root}"]),
    (["8123", "{root}", "--", "--tokenizer", "/models/tokenizer.json", "--allow-any-root"], ["--root", "{root}", "--tokenizer", "/models/tokenizer.json", "--allow-any-root"]),
    (["--", "--endpoint-url", "http://minio:9000"], ["--root", str(PROJECT / "rollout_samples"), "--endpoint-url", "http://minio:9000"]),
    (["0008123", "{root}"], ["--root", "{root}"]),  # leading zeros: port 8123
])
def test_start_sh_passes_the_options_after_two_dashes_to_the_page(tmp_path, arguments, page_options):
    """docs/launch.md's `bash start.sh PORT ROOT -- --tokenizer ...`: the page gets them after its root."""
    python, written = tmp_path / "python", tmp_path / "arguments"
    python.write_text(ARGUMENTS_WRITTEN)
    python.chmod(0o755)
    env = {name: value for name, value in os.environ.items() if name not in ("RL_LOGGING_BOARD_PORT", "RL_LOGGING_BOARD_ROOT")}
    env |= {"RL_LOGGING_BOARD_PYTHON": str(python), "ARGUMENTS_FILE": str(written)}
    root = str(tmp_path)
    subprocess.run(["bash", "start.sh", *(argument.format(root=root) for argument in arguments)], cwd=PROJECT, env=env, check=True, capture_output=True)
    run = written.read_text().splitlines()
    assert run[run.index("--") + 1 :] == [option.format(root=root) for option in page_options]
    assert run[run.index("--server.port") + 1] == ("8901" if arguments[0] == "--" else "8123")


@pytest.mark.parametrize("arguments, said", [
    (["8123", "{root}", "extra"], "more than a port and a root before --: 8123 {root} extra"),
    (["--tokenizer", "x"], "--tokenizer before --: the page's options go after --"),
    (["8123", "{root}", "--", "--root", "/elsewhere"], "--root after --: give ROOT as the second argument"),
    (["{root}"], "the port is not a number from 1 to 65535: '{root}'"),
    (["99999", "{root}"], "the port is not a number from 1 to 65535: '99999'"),
    (["0", "{root}"], "the port is not a number from 1 to 65535: '0'"),
    (["+80", "{root}"], "the port is not a number from 1 to 65535: '+80'"),
    (["", "{root}"], "the port is not a number from 1 to 65535: ''"),
    (["8123", ""], "ROOT is empty"),  # "$ROOT" of an unset ROOT: not the bundled runs
])
def test_start_sh_says_what_is_wrong_with_its_arguments(tmp_path, arguments, said):
    env = dict(os.environ, RL_LOGGING_BOARD_PYTHON="/bin/false")
    result = subprocess.run(["bash", "start.sh", *(argument.format(root=tmp_path) for argument in arguments)], cwd=PROJECT, env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr == f"start.sh: {said.format(root=tmp_path)} (usage: bash start.sh [PORT] [ROOT] [-- PAGE OPTIONS])\n"


# Every module of this project that an example or a bench script imports from exists and defines the names imported
# (a module moved into tests/support/ had left two examples failing at their first line).
@pytest.mark.parametrize("script", sorted([*(PROJECT / "examples").glob("*.py"), *(PROJECT / "bench").glob("*.py")]), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_project_import_of_a_script_resolves(script):
    for node in ast.walk(ast.parse(script.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module.split(".")[0] not in ("tests", "rl_board", "rollout_logger", "bench", "examples"):
            continue
        base = PROJECT / node.module.replace(".", "/")
        source = next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.exists()), None)
        assert source is not None, f"{script.name} imports {node.module}, which is no module of this project"
        defined = top_level_names(source)
        for alias in node.names:
            submodule = base / alias.name
            assert alias.name in defined or submodule.with_suffix(".py").exists() or submodule.is_dir(), f"{script.name}: {node.module} defines no {alias.name}"


# The names a module defines or imports at its top level (a package's lazily imported API: its __getattr__'s names too).
def top_level_names(source: Path) -> set[str]:
    names = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            names.update(target.id for target in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(target, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    if "__getattr__" in names:
        names.update(string.value for string in ast.walk(ast.parse(source.read_text())) if isinstance(string, ast.Constant) and isinstance(string.value, str) and string.value.isidentifier())
    return names
