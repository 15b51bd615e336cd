"""``storelib serve``: a RocketMQ 5 gRPC endpoint over the store, until SIGTERM or SIGINT.

>>> top = argparse.ArgumentParser(); register(top.add_subparsers())
>>> top.parse_args(["serve", "--store", "/tmp/s", "--port", "0"]).port
0
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING

from storelib.admin.command import add_verb
from storelib.admin.output import Output
from storelib.cli import Progress

if TYPE_CHECKING:
    from storelib.store import MessageStore

__all__ = ["register"]


def _serve(store: "MessageStore", args: argparse.Namespace, out: Output, progress: Progress) -> str:
    """Serve until SIGTERM or SIGINT; acks are stored, so stopping anywhere loses nothing."""
    from storelib.serve import Endpoint  # gRPC only for this verb

    why: list[str] = []
    endpoint = Endpoint(
        store,
        host=args.host,
        port=args.port,
        follow=False if args.no_follow else args.follow,
        advertise=args.advertise,
        min_polling_ms=args.min_long_polling_ms,
    )

    def on_signal(signum: int, frame: object) -> None:
        why.append(signal.Signals(signum).name)
        endpoint.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    endpoint.start()
    print(f"serving RocketMQ 5 gRPC on {endpoint.address} over {store.root}", flush=True)
    endpoint.wait()
    progress.say("stopping: calls under way end, then the follower")
    endpoint.stop()
    return f"stopped by {why[0] if why else 'request'} after {progress.elapsed:.1f}s"


def register(sub: "argparse._SubParsersAction") -> None:
    p = add_verb(
        sub,
        "serve",
        _serve,
        """Serve the store to RocketMQ 5 clients (gRPC, apache.rocketmq.v2.MessagingService).
Any RocketMQ 5 client pointed at HOST:PORT sends, receives and acks, with tags, SQL92, FIFO groups, delays and
transactions. The endpoint dispatches what arrives (unless --no-follow), delivers delayed messages and checks
back orphaned transactions. Several endpoints over one store act as one proxy cluster.""",
        create=True,
        conflicts=[("no_follow", "follow")],
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (0.0.0.0: all)")
    p.add_argument("--port", type=int, default=8081, help="port (0: a free one)")
    p.add_argument("--advertise", default=None, help="host clients are told to reach; --host when not given")
    p.add_argument(
        "--follow",
        choices=("process", "thread"),
        default="process",
        help="dispatch in a follower process of the endpoint's, or on a thread of it",
    )
    p.add_argument("--no-follow", action="store_true", help="leave dispatching to another process")
    p.add_argument(
        "--min-long-polling-ms",
        type=int,
        default=5000,
        help="shortest hold of a receive that finds nothing (ms)",
    )
