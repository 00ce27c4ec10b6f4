"""mqrules/remoting is pure (docs/architecture.md, floor 0; .importlinter "pure"): it imports with the
standard library alone, and its functions stay short."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mqrules" / "remoting"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def test_the_package_imports_with_the_standard_library_alone():
    # -S: no site-packages, so nothing but the standard library can be imported
    imports = ";".join(f"import mqrules.remoting.{m}" for m in MODULES)
    code = (
        f"import sys; sys.path.insert(0, sys.argv[1]); {imports};"
        "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - {'mqrules', '__main__'}))"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_function_is_longer_than_80_lines():
    long = [
        f"{path.name}:{node.lineno} {node.name}"
        for path in sorted(PACKAGE.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []
