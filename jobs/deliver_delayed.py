"""Delivery job: move every delayed, timer and sent-back message that is due to its real topic.

    spark-submit --properties-file spark-defaults.conf jobs/deliver_delayed.py --store PATH [--now MS]

Runs dispatch, delivers what is due, and dispatches the delivered messages, so they can be pulled
when it ends. Safe to run on a schedule (every second or minute) and to kill and rerun at any point:
each message is delivered exactly once.

The same as ``storelib deliver`` (:mod:`storelib.admin.upkeep`); ``--help`` lists the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storelib.admin import main as storelib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return storelib(["deliver", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
