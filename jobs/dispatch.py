"""Dispatch job: build consume queue and index rows for everything new in a store's commitlog.

    spark-submit --properties-file spark-defaults.conf jobs/dispatch.py --store PATH

Safe to kill and rerun at any point: each table commits its rows and its progress together.

The same as ``storelib dispatch`` (:mod:`storelib.admin.upkeep`); ``--help`` lists the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storelib.admin import main as storelib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return storelib(["dispatch", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
