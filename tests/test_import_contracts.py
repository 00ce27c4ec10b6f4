"""The floors of docs/architecture.md hold (.importlinter, run by `make lint`), and a wrong arrow breaks
them: the contracts are run on a copy of the tree, once as it is and once with one wrong import per
contract planted in it."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONFIG = configparser.ConfigParser()
CONFIG.read(ROOT / ".importlinter")
PACKAGES = tuple(CONFIG["importlinter"]["root_packages"].split())

# (module file to plant the import in, the import, the contract it must break)
WRONG = [
    (
        "nameserver/_probe_sibling.py",
        "import controlplane.controller.services",
        "The nameserver and the controller never import each other",
    ),
    (
        "controlplane/controller/core/_probe_pure.py",
        "import django.db",
        "Pure cores import the standard library and each other only",
    ),
    (
        "controlplane/push_probe_floor.py",
        "import dashboards.live",
        "Floors: composition root > edges > operations > siblings > ground",
    ),
    (
        "brokers/_probe_apart.py",
        "import django.conf",
        "Brokers, Spark jobs, chaos, testkit: no Django, no control plane",
    ),
    ("chaos/_probe_tests.py", "import tests.conftest", "Chaos and bench use the test kit, never tests/"),
    ("mqrules/_probe_rules.py", "import brokers.topics", "The shared rules (mqrules) import neither half of the system"),
    (
        "brokers/_probe_alone.py",
        "import controlplane.doctor",
        "Brokers never import the control plane's package (only mqrules, below both)",
    ),
    (
        "brokers/store/_probe_floor.py",
        "import brokers.ha.service",
        "Broker floors: root > edges | control > services > ha > store > core",
    ),
    (
        "brokers/remoting/_probe_sibling.py",
        "import brokers.grpc.service",
        "Broker floors: root > edges | control > services > ha > store > core",
    ),
    ("brokers/core/_probe_pure.py", "import asyncio", "The broker's core is pure: the standard library, mqrules and itself"),
]


def _copy_tree(dest: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    shutil.copy(ROOT / ".importlinter", dest / ".importlinter")


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=240,
        env={"PYTHONPATH": str(where), "PATH": str(LINT_IMPORTS.parent)},
    )


def _broken(output: str) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^(.+?) BROKEN", output, re.M)}


def test_the_tree_keeps_its_floors(tmp_path):
    _copy_tree(tmp_path)
    done = _lint(tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: " in done.stdout and " broken" in done.stdout and _broken(done.stdout) == set()


def test_a_wrong_import_breaks_its_contract(tmp_path):
    _copy_tree(tmp_path)
    # the floor probe must sit in the ground layer: register it as a ground module beside controlplane.push
    config = (tmp_path / ".importlinter").read_text()
    assert "controlplane.push :" in config
    probe = config.replace("controlplane.push :", "controlplane.push : controlplane.push_probe_floor :")
    (tmp_path / ".importlinter").write_text(probe)
    for path, line, _ in WRONG:
        (tmp_path / path).write_text(line + "\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert _broken(done.stdout) == {contract for _, _, contract in WRONG}, done.stdout[-4000:]


# Modules of the ground package that stand beside the floors on purpose: run before Django (the doctor)
# or start processes (the launcher); both import no app.
APART_IN_CONTROLPLANE = {"controlplane.doctor", "controlplane.launcher"}


def test_every_control_plane_module_has_a_floor():
    """A module added to controlplane/ without a place in .importlinter would escape every contract."""
    named = set(re.findall(r"[a-z_][a-z_.]*", CONFIG["importlinter:contract:floors"]["layers"]))
    pure = set(CONFIG["importlinter:contract:pure"]["source_modules"].split())
    modules = {
        f"controlplane.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "controlplane").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }
    unplaced = modules - named - pure - APART_IN_CONTROLPLANE
    assert not unplaced, f"give these a floor in .importlinter: {sorted(unplaced)}"
