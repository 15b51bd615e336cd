"""Dispatch job: build consume queue and index rows for everything new in a store's commitlog.

    spark-submit --properties-file spark-defaults.conf jobs/dispatch.py --store PATH

Safe to kill and rerun at any point: each table commits its rows and its progress together.
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
    args = parser.parse_args(argv)
    try:
        store = MessageStore.open(args.store, get_spark("storelib-dispatch"), create=args.create)
        result = store.dispatch()
    except StoreError as e:
        print(f"dispatch failed: {e}", file=sys.stderr)
        return 2
    print(f"dispatched commitlog [{result.from_offset}, {result.to_offset}): "
          + ", ".join(f"{n} {t} rows" for t, n in result.rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
