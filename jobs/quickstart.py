"""Quick start: send a few thousand messages to a local store, dispatch them, and read them back.

    spark-submit --properties-file spark-defaults.conf jobs/quickstart.py --store ./data/quickstart
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.demo import quickstart  # noqa: E402
from storelib import StoreError  # noqa: E402
from storelib.session import get_spark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="./data/quickstart", help="root folder of the store (created if absent)")
    parser.add_argument("--messages", type=int, default=3000, help="messages to send")
    args = parser.parse_args(argv)
    try:
        summary = quickstart(get_spark("storelib-quickstart"), args.store, args.messages)
    except StoreError as e:
        print(f"quickstart failed: {e}", file=sys.stderr)
        return 2
    print(summary.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
