"""Transaction check-back job: ask producer groups' checkers about half messages pending too long.

    spark-submit --properties-file spark-defaults.conf jobs/check_transactions.py --store PATH [--now MS]

Checkers are registered per producer group by import path (``store.register_transaction_checker``)
and must be importable by this job's Python. Safe to run on a schedule and to kill and rerun at any
point: nothing is committed twice and no answer is lost (the checker is asked again).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storelib import MessageStore, StoreError  # noqa: E402
from storelib.session import get_spark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="root folder or URI of the store")
    parser.add_argument("--create", action="store_true", help="create the store if the path holds none")
    parser.add_argument("--now", type=int, default=None, help="the time to check at, epoch ms (default: the clock)")
    args = parser.parse_args(argv)
    try:
        store = MessageStore.open(args.store, get_spark("storelib-check-transactions"), create=args.create)
        r = store.check_transactions(now=args.now)
    except StoreError as e:
        print(f"check_transactions failed: {e}", file=sys.stderr)
        return 2
    for error in r.errors:
        print(f"checker error: {error}", file=sys.stderr)
    print(f"checked {r.checked} half messages: {r.committed} committed, {r.rolled_back} rolled back, "
          f"{r.unknown} unknown, {r.given_up} given up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
