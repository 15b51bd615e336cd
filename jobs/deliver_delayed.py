"""Delivery job: move every delayed, timer and sent-back message that is due to its real topic.

    spark-submit --properties-file spark-defaults.conf jobs/deliver_delayed.py --store PATH [--now MS]

Runs dispatch, delivers what is due, and dispatches the delivered messages, so they can be pulled
when it ends. Safe to run on a schedule (every second or minute) and to kill and rerun at any point:
each message is delivered exactly once.
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
    parser.add_argument("--now", type=int, default=None, help="the time to deliver at, epoch ms (default: the clock)")
    args = parser.parse_args(argv)
    try:
        store = MessageStore.open(args.store, get_spark("storelib-deliver-delayed"), create=args.create)
        store.dispatch()
        result = store.deliver_delayed(now=args.now)
        if result.delivered:
            store.dispatch()
    except StoreError as e:
        print(f"deliver_delayed failed: {e}", file=sys.stderr)
        return 2
    levels = ", ".join(f"level {n}: {c}" for n, c in sorted(result.levels.items())) or "no level"
    print(f"delivered {result.delivered} messages ({levels}; timer: {result.timer}; recalled: {result.recalled}); "
          f"newest deliver time {result.newest_delivered_ms}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
