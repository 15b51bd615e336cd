"""The tree's habits, checked by the tools that define them: ruff (lint and format) and mypy.

ruff reads no ``setup.cfg``, so its settings live here, as ``--config`` overrides; mypy's are in
``setup.cfg`` (``[mypy]``). Run the same by hand from the repository's root::

    ruff check storelib jobs tests --config 'line-length = 120' ...   (the arguments of RUFF below)
    ruff format --check storelib jobs tests --config 'line-length = 120'
    mypy
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ["storelib", "jobs", "tests", "notebooks"]

#: pycodestyle errors and warnings, pyflakes, import order (an import that fits on one line is on one line);
#: 120 characters a line.
RUFF = [
    "--config",
    "line-length = 120",
    "--config",
    "lint.select = ['E', 'W', 'F', 'I']",
    "--config",
    "lint.isort.known-first-party = ['storelib', 'jobs', 'tests']",
    "--config",
    "lint.isort.split-on-trailing-comma = false",
]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", *TREE, *RUFF)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_tree_is_formatted_as_ruff_formats_it():
    done = _run("ruff", "format", "--check", "--no-cache", *TREE, "--config", "line-length = 120")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_finds_nothing():
    done = _run("mypy")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
