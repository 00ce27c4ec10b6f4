"""The broker's shape (issue 35), checked on its source: short functions, no callables assigned onto
another object's attributes (callbacks are constructor arguments, so the code a call site runs is
visible there), and a table test for every rule of the pure core.

The import rules (brokers never import ``controlplane``; the floors inside ``brokers``; ``brokers.core``
pure) are import-linter contracts in ``.importlinter``, checked by ``make lint``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BROKERS = ROOT / "brokers"
CORE = BROKERS / "core"
MAX_FUNCTION_LINES = 80


def _sources(under: Path = BROKERS):
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(under.rglob("*.py"))]


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def test_no_function_in_the_broker_is_longer_than_80_lines():
    long = [
        f"{_where(path, node)} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], "split these:\n" + "\n".join(long)


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).split(".")[-1] in ("property", "cached_property", "setter") for d in node.decorator_list)


def _methods() -> set[str]:
    """Every method name defined in brokers/ (properties aside: reading one gives a value)."""
    return {
        n.name
        for _, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for n in node.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_property(n)
    }


def _is_callable(value: ast.expr, module_functions: set[str], methods: set[str]) -> bool:
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Call):  # functools.partial(...)
        f = value.func
        return (isinstance(f, ast.Name) and f.id == "partial") or (isinstance(f, ast.Attribute) and f.attr == "partial")
    if isinstance(value, ast.Name):
        return value.id in module_functions
    if isinstance(value, ast.Attribute):  # self._on_role, self.ha.water_levels: a bound method
        return value.attr in methods
    return False


def _owner(target: ast.expr) -> ast.expr | None:
    """The object whose attribute an assignment target sets (``x.on_push["k"]`` sets one of x's)."""
    while isinstance(target, ast.Subscript):
        target = target.value
    return target.value if isinstance(target, ast.Attribute) else None


def _is_self(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _registers_a_hook(call: ast.Call) -> bool:
    """``setattr(...)``, or ``x.on_request.update(...)``: filling another object's table of hooks."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == "setattr"
    hooks = f.value if isinstance(f, ast.Attribute) and f.attr in ("update", "append", "setdefault", "add") else None
    return isinstance(hooks, ast.Attribute) and hooks.attr.startswith("on_") and not _is_self(hooks.value)


def test_no_part_assigns_a_callable_onto_another_objects_attribute():
    methods = _methods()
    found = []
    for path, tree in _sources():
        module_functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _registers_a_hook(node):
                found.append(f"{_where(path, node)} {ast.unparse(node)}")
            if not isinstance(node, ast.Assign | ast.AnnAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                owner = _owner(target)
                if owner is None or _is_self(owner):
                    continue
                if node.value is not None and _is_callable(node.value, module_functions, methods):
                    found.append(f"{_where(path, node)} {ast.unparse(target)} = {ast.unparse(node.value)}")
    assert found == [], "pass these as constructor arguments instead:\n" + "\n".join(found)


def test_the_detector_sees_a_late_bound_callback():
    tree = ast.parse("class A:\n    def f(self):\n        self.link.on_done = self.f\n        self.link.hooks['x'] = lambda: 1\n")
    seen = [
        ast.unparse(t)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if not _is_self(_owner(t)) and _is_callable(n.value, set(), {"f"})
    ]
    assert seen == ["self.link.on_done", "self.link.hooks['x']"]


def _core_rules() -> dict[str, Path]:
    return {
        node.name: path
        for path, tree in _sources(CORE)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def _table_tests() -> str:
    """The text of every unit-tier test module that imports brokers.core and tabulates cases."""
    texts = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        if "brokers.core" in text and "parametrize" in text and "mark.unit" in text:
            texts.append(text)
    return "\n".join(texts)


def test_every_rule_of_the_broker_core_has_a_table_test():
    rules = _core_rules()
    assert rules, "brokers/core/ holds no rules"
    tables = _table_tests()
    untested = sorted(f"{path.relative_to(ROOT)}: {name}" for name, path in rules.items() if name not in tables)
    assert untested == [], "no table test names these rules:\n" + "\n".join(untested)
