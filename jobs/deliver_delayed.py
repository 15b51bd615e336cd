"""Delivery job: move every delayed, timer and sent-back message that is due to its real topic.

    spark-submit --properties-file spark-defaults.conf jobs/deliver_delayed.py --store PATH [--now MS]

Runs dispatch, delivers what is due, and dispatches the delivered messages, so they can be pulled
when it ends. Safe to run on a schedule (every second or minute) and to kill and rerun at any point:
each message is delivered exactly once.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storelib import MessageStore  # noqa: E402
from storelib.cli import Progress, job_parser, non_negative_int, run_job  # noqa: E402
from storelib.session import get_spark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__)
    parser.add_argument("--now", type=non_negative_int, default=None, help="the time to deliver at, epoch ms (None: the clock)")
    args = parser.parse_args(argv)

    def body(progress: Progress) -> str:
        store = MessageStore.open(args.store, get_spark("storelib-deliver-delayed"), create=args.create)
        progress.say("dispatching what is new")
        store.dispatch()
        progress.say("delivering what is due")
        result = store.deliver_delayed(now=args.now)
        if not (result.delivered or result.recalled):
            return "nothing new: no delayed or timer message is due"
        if result.delivered:
            progress.say(f"dispatching {result.delivered} delivered messages")
            store.dispatch()
        levels = ", ".join(f"level {n}: {c}" for n, c in sorted(result.levels.items())) or "no level"
        return (f"delivered {result.delivered} messages ({levels}; timer: {result.timer}; recalled: {result.recalled}); "
                f"newest deliver time {result.newest_delivered_ms}")

    return run_job("deliver_delayed", body)


if __name__ == "__main__":
    sys.exit(main())
