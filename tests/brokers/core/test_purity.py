"""brokers/core is pure (docs/architecture.md §2): each of its modules imports the standard library
(no asyncio, no sockets, files or threads), ``mqrules`` and brokers/core itself, nothing else."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CORE = Path(__file__).resolve().parents[3] / "brokers" / "core"
IO_MODULES = {"asyncio", "socket", "selectors", "threading", "subprocess", "multiprocessing", "io", "os", "pathlib", "shutil"}


def imported(path: Path) -> list[tuple[str, int]]:
    """(top-level module or "." for brokers.core, relative level) of every import of ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level))
    return out


@pytest.mark.parametrize("module", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_a_core_module_imports_the_standard_library_mqrules_and_the_core_only(module):
    for name, level in imported(module):
        top = name.split(".")[0]
        if level == 1:
            continue  # brokers.core itself
        assert level == 0, f"{module.name}: imports beyond brokers/core ({'.' * level}{name})"
        allowed = top == "mqrules" or (top in sys.stdlib_module_names and top not in IO_MODULES)
        assert allowed or name == "__future__", f"{module.name}: imports {name}"
