"""Pages shown to operators carry no internal references: no section numbers of the reference notes
("reference §5.3", "§4.2"), no seed documents ("seed 000"), no issue numbers or patch markers. Those
belong in code comments, for developers; an operator cannot follow them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
INTERNAL = re.compile(
    r"§|\bseeds?\s+\d{3}\b|\breference\s+§|\bissue\s*#?\d+"  # section signs, seeds, issues
    r"|\{#.*\b(issue|end)\b.*#\}|<!--.*\b(issue|end)\b.*-->",
    re.IGNORECASE,
)  # patch markers


def operator_facing_files() -> list[Path]:
    pages = sorted((ROOT / "templates").rglob("*.html"))
    scripts = sorted((ROOT / "static").rglob("*.js"))
    return pages + scripts


def internal_references(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if INTERNAL.search(line)]


@pytest.mark.parametrize(
    "line, internal",
    [
        ("<h1>Audits <small>seed 000, reference §5.3–§5.4</small></h1>", True),
        ("<p>see §4.2</p>", True),
        ("{# issue #8 #}", True),
        ("<!-- end audits -->", True),
        ("<h1>Consumer-offset rollback audits <small>committed offsets that went backwards, and why</small></h1>", False),
        ("<td>seeded at {{ run.created_at }}</td>", False),
    ],
)
def test_the_pattern_tells_internal_references_from_page_text(line, internal):
    assert bool(internal_references(line)) is internal


def test_templates_and_page_scripts_carry_no_internal_reference():
    files = operator_facing_files()
    assert any(p.name == "results.html" for p in files) and any(p.suffix == ".js" for p in files)
    found = {str(p.relative_to(ROOT)): refs for p in files if (refs := internal_references(p.read_text()))}
    assert found == {}
