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


def conformance_params(name: str, key: str, id_of) -> list:
    """One pytest.param per case, or a single skipped param when the folder is absent."""
    try:
        cases = load_cases(name)[key]
    except pytest.skip.Exception as skipped:
        return [pytest.param(None, marks=pytest.mark.skip(reason=str(skipped)))]
    return [pytest.param(case, id=f"{i:02d}-{id_of(case)}") for i, case in enumerate(cases)]


def utf8_cases(name: str) -> list[dict]:
    """The conformance cases whose strings Arrow can hold (valid UTF-8: no unpaired surrogates)."""
    out = []
    for case in load_cases(name)["cases"]:
        try:
            "".join(str(v) for v in case.values()).encode("utf-8")
        except UnicodeEncodeError:
            continue
        out.append(case)
    return out
