"""Locate and load RocketMQ's reference cases (the shared conformance folder).

The folder defaults to ``<workspace>/shared/conformance`` next to the repository and can be
moved with the ``STORELIB_CONFORMANCE`` environment variable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

CONFORMANCE_DIR = Path(
    os.environ.get("STORELIB_CONFORMANCE", Path(__file__).resolve().parents[2] / "shared" / "conformance")
)


def load_cases(name: str) -> dict:
    """The parsed json file ``name`` (``.json`` optional); skips the calling test if it is absent."""
    path = CONFORMANCE_DIR / (name if name.endswith(".json") else f"{name}.json")
    if not path.is_file():
        pytest.skip(f"conformance file {path} not found (set STORELIB_CONFORMANCE)")
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)
