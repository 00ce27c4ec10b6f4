"""``make doctor``'s test clients (controlplane/doctor.py): the npm clients' checks against their lock
files, the C++ remoting client's virtualenv, what each install runs, and the one line a user gets when
it cannot be done. Nothing is installed: ``_run`` is replaced where a command would run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import remoting_clients
from controlplane import doctor

pytestmark = pytest.mark.unit


def npm_client(root: Path, package: str, installed: str | None, locked: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lock = {"packages": {f"node_modules/{package}": {"version": locked}}}
    (root / "package-lock.json").write_text(json.dumps(lock))
    if installed is not None:
        (root / "node_modules" / package).mkdir(parents=True)
        (root / "node_modules" / package / "package.json").write_text(json.dumps({"version": installed}))
    return root


def done(returncode: int = 0, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], returncode, stdout, stderr)


class Recorder:
    """Stands in for ``doctor._run``: records each argv and answers the given results in turn."""

    def __init__(self, *results: subprocess.CompletedProcess[str] | None):
        self.results = list(results)
        self.argvs: list[list[str]] = []

    def __call__(self, argv, timeout=30, cwd=None):
        self.argvs.append(list(argv))
        return self.results.pop(0) if self.results else done()


# --- the committed pins ------------------------------------------------------------------------------


def test_the_committed_pins_are_the_issues_versions():
    assert doctor.pinned_version(doctor.REMOTING_PY_REQUIREMENTS, "rocketmq") == "0.4.4"
    lock = json.loads((doctor.REMOTING_NODE_DIR / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/ali-ons"]["version"] == "3.12.0"
    assert json.loads((doctor.REMOTING_NODE_DIR / "package.json").read_text())["dependencies"] == {"ali-ons": "3.12.0"}


@pytest.mark.parametrize(
    "text, version",
    [
        ("rocketmq==0.4.4\n", "0.4.4"),
        ("# a comment\nRocketMQ == 0.4.4  # pinned\n", "0.4.4"),
        ("rocketmq>=0.4\n", None),
        ("rocketmq-python-client==5.1.2\n", None),
        ("", None),
    ],
    ids=["pinned", "comment-and-case", "not-pinned", "another-package", "empty"],
)
def test_the_pinned_version_is_read_from_requirements(tmp_path, text, version):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(text)
    assert doctor.pinned_version(requirements, "rocketmq") == version


def test_no_requirements_file_pins_nothing(tmp_path):
    assert doctor.pinned_version(tmp_path / "missing.txt", "rocketmq") is None


# --- the npm clients ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "installed, locked, ok, said",
    [
        ("3.12.0", "3.12.0", True, "ali-ons 3.12.0 in"),
        (None, "3.12.0", False, "node_modules/ali-ons is missing"),
        ("3.11.0", "3.12.0", False, "ali-ons 3.11.0 installed, the lock file pins 3.12.0"),
    ],
    ids=["found", "not-installed", "other-version"],
)
def test_an_npm_client_is_checked_against_its_lock_file(tmp_path, installed, locked, ok, said):
    root = npm_client(tmp_path / "remoting-node", "ali-ons", installed, locked)
    found, detail = doctor.check_npm_client(root, "ali-ons")
    assert found is ok and said in detail


def test_the_remoting_node_client_installs_with_npm_ci_without_scripts(tmp_path, monkeypatch):
    run = Recorder(done())
    monkeypatch.setattr(doctor, "_run", run)
    monkeypatch.setattr(doctor, "check_node", lambda: (True, "node"))
    monkeypatch.setattr(doctor.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(doctor, "REMOTING_NODE_DIR", tmp_path)
    assert doctor.install_remoting_node_client() == (True, "npm ci")
    assert run.argvs == [["/usr/bin/npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"]]


def test_a_failed_npm_ci_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "_run", Recorder(done(1, stderr="npm ERR! a\nnpm ERR! network unreachable\n")))
    monkeypatch.setattr(doctor, "check_node", lambda: (True, "node"))
    monkeypatch.setattr(doctor.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert doctor.install_npm_client(tmp_path) == (False, "npm ci failed: npm ERR! network unreachable")


def test_npm_ci_needs_node_first(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    ok, detail = doctor.install_npm_client(tmp_path)
    assert not ok and detail == f"Node.js {doctor.NODE_MIN_MAJOR}+ and npm are needed first"


# --- the C++ client in a virtualenv of its own --------------------------------------------------------


@pytest.fixture
def remoting_py(tmp_path, monkeypatch) -> Path:
    """clients/remoting-py in a temporary folder, pinning rocketmq 0.4.4, with no virtualenv yet."""
    root = tmp_path / "remoting-py"
    root.mkdir()
    (root / "requirements.txt").write_text("rocketmq==0.4.4\n")
    monkeypatch.setattr(doctor, "REMOTING_PY_DIR", root)
    monkeypatch.setattr(doctor, "REMOTING_PY_VENV", root / ".venv")
    monkeypatch.setattr(doctor, "REMOTING_PY_REQUIREMENTS", root / "requirements.txt")
    return root


def make_python(root: Path) -> Path:
    python = doctor.venv_python(root / ".venv")
    python.parent.mkdir(parents=True)
    python.touch()
    return python


@pytest.mark.parametrize(
    "probe, ok, said",
    [
        (done(0, stdout="0.4.4\n"), True, "rocketmq 0.4.4 in"),
        (done(0, stdout="0.4.3\n"), False, "rocketmq 0.4.3 installed, requirements.txt pins 0.4.4"),
        (
            done(1, stderr="Traceback\nOSError: librocketmq.so: cannot open shared object file\n"),
            False,
            "cannot load rocketmq: OSError",
        ),
        (None, False, "cannot load rocketmq: timed out"),
    ],
    ids=["found", "other-version", "library-does-not-load", "timed-out"],
)
def test_the_cpp_client_is_checked_by_loading_it_in_its_virtualenv(remoting_py, monkeypatch, probe, ok, said):
    python = make_python(remoting_py)
    run = Recorder(probe)
    monkeypatch.setattr(doctor, "_run", run)
    found, detail = doctor.check_remoting_py_client()
    assert found is ok and said in detail
    assert run.argvs[0][:2] == [str(python), "-c"] and "import importlib.metadata as m, rocketmq.client" in run.argvs[0][2]


def test_no_virtualenv_is_missing(remoting_py):
    assert doctor.check_remoting_py_client() == (False, f"{doctor.venv_python(remoting_py / '.venv')} is missing")


def test_requirements_without_the_pin_say_so(remoting_py):
    (remoting_py / "requirements.txt").write_text("rocketmq\n")
    ok, detail = doctor.check_remoting_py_client()
    assert not ok and detail.endswith("pins no rocketmq==VERSION")


def test_the_install_makes_the_virtualenv_with_this_interpreter_then_pip_installs_the_pins(remoting_py, monkeypatch):
    run = Recorder(done(), done())
    monkeypatch.setattr(doctor, "_run", run)
    assert doctor.install_remoting_py_client() == (True, "python -m venv + pip install -r requirements.txt")
    python = str(doctor.venv_python(remoting_py / ".venv"))
    assert run.argvs == [
        [sys.executable, "-m", "venv", str(remoting_py / ".venv")],
        [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", str(remoting_py / "requirements.txt")],
    ]


def test_an_existing_virtualenv_only_gets_pip_install(remoting_py, monkeypatch):
    make_python(remoting_py)
    run = Recorder(done())
    monkeypatch.setattr(doctor, "_run", run)
    assert doctor.install_remoting_py_client() == (True, "pip install -r requirements.txt")
    assert [argv[1:4] for argv in run.argvs] == [["-m", "pip", "install"]]


def test_a_failed_pip_install_is_one_line(remoting_py, monkeypatch):
    make_python(remoting_py)
    error = "ERROR: Could not find a version that satisfies the requirement rocketmq==0.4.4"
    monkeypatch.setattr(doctor, "_run", Recorder(done(1, stderr=f"Looking in indexes\n{error}\n")))
    assert doctor.install_remoting_py_client() == (False, f"-m pip install failed: {error}")


# --- what make doctor --for test reports -----------------------------------------------------------------


def test_make_doctor_installs_a_missing_remoting_client_and_reports_it(monkeypatch):
    checks = iter([(False, "node_modules/ali-ons is missing"), (True, "ali-ons 3.12.0 in clients/remoting-node")])
    name = "ali-ons (clients/remoting-node)"
    requirement = next(r for r in doctor.REQUIREMENTS if r.name == name)
    monkeypatch.setattr(
        doctor,
        "REQUIREMENTS",
        (doctor.Requirement(name, frozenset({"test"}), lambda: next(checks), install=lambda: (True, "npm ci")),),
    )
    assert requirement.install is doctor.install_remoting_node_client and requirement.needed_for == frozenset({"test"})
    (finding,) = doctor.examine("test", install=True)
    assert finding == doctor.Finding(name, doctor.Status.INSTALLED, "ali-ons 3.12.0 in clients/remoting-node (npm ci)")


@pytest.mark.parametrize("name", ["ali-ons (clients/remoting-node)", "rocketmq C++ client (clients/remoting-py)"])
def test_a_remoting_client_that_cannot_be_installed_is_missing_with_what_to_do(monkeypatch, name):
    original = next(r for r in doctor.REQUIREMENTS if r.name == name)
    broken = doctor.Requirement(
        name, original.needed_for, lambda: (False, "not there"), install=lambda: (False, "no network"), advice=original.advice
    )
    monkeypatch.setattr(doctor, "REQUIREMENTS", (broken,))
    (finding,) = doctor.examine("test", install=True)
    assert finding.status is doctor.Status.MISSING
    assert finding.detail == f"not there; cannot install here: no network -> {original.advice}"
    assert "\n" not in finding.detail and "then run again" in finding.detail
    assert doctor.examine("demo", install=True) == []  # the test clients are for the test suite only


# --- the drivers' builders when nothing is installed ---------------------------------------------------


def test_the_cpp_driver_says_run_make_doctor_when_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(remoting_clients, "PY_PYTHON", tmp_path / ".venv" / "bin" / "python")
    monkeypatch.setattr(remoting_clients, "PY_CLIENT_DIR", tmp_path)
    with pytest.raises(remoting_clients.RemotingClientMissing, match="run make doctor"):
        remoting_clients.remoting_py_process("produce", "p", tmp_path)


def test_the_node_driver_says_run_make_doctor_when_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(remoting_clients, "NODE_PACKAGE", tmp_path / "node_modules" / "ali-ons" / "package.json")
    with pytest.raises(remoting_clients.RemotingClientMissing, match="run make doctor"):
        remoting_clients.remoting_node_process("produce", "p", tmp_path)
