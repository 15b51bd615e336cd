"""The tree's habits, checked by the tools that define them: ruff (lint and format) and mypy.

Their settings are the project's: ``[tool.ruff]`` in ``pyproject.toml``, ``[mypy]`` in ``setup.cfg``. The same by
hand, from the repository's root: ``ruff check``, ``ruff format --check``, ``mypy``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ["storelib", "jobs", "tests", "notebooks"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", *TREE)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_tree_is_formatted_as_ruff_formats_it():
    done = _run("ruff", "format", "--check", "--no-cache", *TREE)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_finds_nothing():
    done = _run("mypy")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
