"""Dispatch job: build consume queue and index rows for everything new in a store's commitlog.

    spark-submit --properties-file spark-defaults.conf jobs/dispatch.py --store PATH

Safe to kill and rerun at any point: each table commits its rows and its progress together.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storelib import MessageStore  # noqa: E402
from storelib.cli import Progress, job_parser, run_job  # noqa: E402
from storelib.session import get_spark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = job_parser(__doc__).parse_args(argv)

    def body(progress: Progress) -> str:
        store = MessageStore.open(args.store, get_spark("storelib-dispatch"), create=args.create)
        progress.say(f"dispatching from commitlog offset {min(store.dispatch_progress().values())} "
                     f"to {store.max_offset()}")
        result = store.dispatch()
        if result.from_offset == result.to_offset:
            return f"nothing new: the store is dispatched up to commitlog offset {result.to_offset}"
        return (f"dispatched commitlog [{result.from_offset}, {result.to_offset}) in {progress.elapsed:.1f}s: "
                + ", ".join(f"{n} {t} rows" for t, n in result.rows.items()))

    return run_job("dispatch", body)


if __name__ == "__main__":
    sys.exit(main())
