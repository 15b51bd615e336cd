"""The documentation's shape (issue 50, item 10): a short README, and lines a reader need not scroll.

The README's two commands (after ``<!-- quickstart-command -->`` and ``<!-- test-command -->``) stay one line
each, since ``.ci/run`` and readers copy them whole; tables keep their rows on one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WIDTH = 120


def long_lines(text: str) -> list[int]:
    """The numbers of lines over ``WIDTH`` characters, leaving out table rows and the marked one-line commands.

    >>> long_lines("short\\n" + "x" * 121 + "\\n| " + "y" * 130 + " |\\n")
    [2]
    >>> long_lines("<!-- test-command -->\\n```\\n" + "z" * 130 + "\\n```\\n")
    []
    """
    lines = text.splitlines()
    marked = {i + 2 for i, x in enumerate(lines) if re.fullmatch(r"<!-- \w+-command -->", x.strip())}
    return [i + 1 for i, x in enumerate(lines) if len(x) > WIDTH and not x.lstrip().startswith("|") and i not in marked]


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_line_is_over_120_characters_outside_tables(path):
    assert long_lines(path.read_text()) == [], f"{path.name}: lines over {WIDTH} characters"
