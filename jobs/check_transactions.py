"""Transaction check-back job: ask producer groups' checkers about half messages pending too long.

    spark-submit --properties-file spark-defaults.conf jobs/check_transactions.py --store PATH [--now MS]

Checkers are registered per producer group by import path (``store.register_transaction_checker``)
and must be importable by this job's Python. Safe to run on a schedule and to kill and rerun at any
point: nothing is committed twice and no answer is lost (the checker is asked again).
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
    parser.add_argument("--now", type=non_negative_int, default=None, help="the time to check at, epoch ms (None: the clock)")
    args = parser.parse_args(argv)

    def body(progress: Progress) -> str:
        store = MessageStore.open(args.store, get_spark("storelib-check-transactions"), create=args.create)
        progress.say("asking the producer groups' checkers about half messages past their timeout")
        r = store.check_transactions(now=args.now)
        for error in r.errors:
            progress.say(f"checker error: {error}")
        if not r.checked:
            return "nothing new: no half message is waiting for a check-back"
        return (f"checked {r.checked} half messages: {r.committed} committed, {r.rolled_back} rolled back, "
                f"{r.unknown} unknown, {r.given_up} given up")

    return run_job("check_transactions", body)


if __name__ == "__main__":
    sys.exit(main())
