"""Quick start: send a few thousand messages to a local store, dispatch them, and read them back.

spark-submit --properties-file spark-defaults.conf jobs/quickstart.py --store ./data/quickstart
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.demo import quickstart  # noqa: E402
from storelib.cli import Progress, job_parser, positive_int, run_job  # noqa: E402
from storelib.session import get_spark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__, store=False)
    parser.add_argument("--store", default="./data/quickstart", help="root folder of the store (created if absent)")
    parser.add_argument("--messages", type=positive_int, default=3000, help="messages to send")
    args = parser.parse_args(argv)

    def body(progress: Progress) -> str:
        progress.say(f"sending {args.messages} messages to {args.store}, dispatching and reading them back")
        return quickstart(get_spark("storelib-quickstart"), args.store, args.messages).text()

    return run_job("quickstart", body)


if __name__ == "__main__":
    sys.exit(main())
