"""Transaction check-back job: ask producer groups' checkers about half messages pending too long.

    spark-submit --properties-file spark-defaults.conf jobs/check_transactions.py --store PATH [--now MS]

Checkers are registered per producer group by import path (``store.register_transaction_checker``)
and must be importable by this job's Python. Safe to run on a schedule and to kill and rerun at any
point: nothing is committed twice and no answer is lost (the checker is asked again).

The same as ``storelib check-transactions`` (:mod:`storelib.admin.upkeep`); ``--help`` lists the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storelib.admin import main as storelib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return storelib(["check-transactions", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
