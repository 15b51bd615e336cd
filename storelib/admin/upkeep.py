"""``storelib dispatch|deliver|check-transactions|retention|compact|vacuum|inspect|verify|repair``: the store's
services and upkeep, one verb each (the jobs under ``jobs/`` run the same verbs under spark-submit).

>>> from storelib.admin import main
>>> main(["inspect", "--store", store.root])   # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
table                      version  files  rows  bytes  dispatched_to
-------------------------  -------  -----  ----  -----  -------------
commitlog                        1      1     1  ...
consume_queue                    1      1     1  ...
...
commitlog offsets [0, 171); 2 topics, 1 groups, 1 subscriptions
0
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading

import pyarrow.compute as pc

from storelib.admin.command import add_verb
from storelib.admin.output import Output
from storelib.cli import Progress, non_negative_int, positive_int, time_ms
from storelib.delta.teardown import set_from_signal_handler
from storelib.dispatch.follow import ROUND_MS
from storelib.local.tail import TailServer
from storelib.maintenance.upkeep import delete_expired
from storelib.model.errors import StoreCorruptedError
from storelib.store import MessageStore

__all__ = ["register"]


def _dispatch(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    if args.follow:
        return _follow(store, args, progress)
    progress.say(f"dispatching from commitlog offset {min(store.dispatch_progress().values())} to {store.max_offset()}")
    result = store.dispatch()
    if result.from_offset == result.to_offset:
        return f"nothing new: the store is dispatched up to commitlog offset {result.to_offset}"
    return f"dispatched commitlog [{result.from_offset}, {result.to_offset}) in {progress.elapsed:.1f}s: " + ", ".join(
        f"{n} {t} rows" for t, n in result.rows.items()
    )


def _follow(store: MessageStore, args: argparse.Namespace, progress: Progress) -> str:
    """Dispatch as messages arrive until SIGTERM or SIGINT; each round is atomic, so stopping is safe anywhere."""
    stop, why = threading.Event(), []

    def on_signal(signum: int, frame: object) -> None:
        why.append(signal.Signals(signum).name)
        set_from_signal_handler(stop)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    rounds = []

    def heard(r) -> None:
        rounds.append(r)
        progress.say(
            f"dispatched commitlog [{r.from_offset}, {r.to_offset}): {r.consume_queue_rows} consume_queue rows"
        )

    progress.say(
        f"following the commitlog from offset {min(store.dispatch_progress().values())}, every {args.interval_ms} ms"
    )
    with TailServer(store.context) if args.serve_pulls else contextlib.nullcontext() as server:
        if server is not None:
            progress.say(
                "serving tail pulls: "
                f"{'yes' if server.serving else 'no (another process does, or the store is not local)'}"
            )
        dispatcher = store.dispatcher()
        if server is not None:  # a round's units go to the tail as they are committed, without a read of their files
            dispatcher.feed = server
        total = dispatcher.run(
            follow=True,
            stop=stop,
            interval_ms=args.interval_ms,
            on_round=heard,
            compact_every_ms=args.compact_every_ms,
            round_ms=args.round_ms,
        )
        if server is not None and server.serving:
            declined = ", ".join(f"{why} {n}" for why, n in server.declined.most_common()) or "none"
            progress.say(
                f"tail pulls answered: {server.answered}; handed back to read the tables: {declined}; "
                f"tails dropped to stay within tail_pulls_max_mb: {server.dropped}"
            )
    return (
        f"stopped by {why[0] if why else 'request'} after {progress.elapsed:.1f}s: {len(rounds)} rounds dispatched "
        f"commitlog [{total.from_offset}, {total.to_offset}), {total.consume_queue_rows} consume_queue rows"
    )


def _deliver(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
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
    return (
        f"delivered {result.delivered} messages ({levels}; timer: {result.timer}; recalled: {result.recalled}); "
        f"newest deliver time {result.newest_delivered_ms}"
    )


def _check(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    progress.say("asking the producer groups' checkers about half messages past their timeout")
    r = store.check_transactions(now=args.now)
    for error in r.errors:
        progress.say(f"checker error: {error}")
    if not r.checked:
        return "nothing new: no half message is waiting for a check-back"
    return (
        f"checked {r.checked} half messages: {r.committed} committed, {r.rolled_back} rolled back, "
        f"{r.unknown} unknown, {r.given_up} given up"
    )


def _retention(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    progress.say("removing expired files, and messages past their topic's retention_ms")
    removed, expired = delete_expired(store.context, args.reserved_hours, args.now)
    expired = {t: n for t, n in expired.items() if n}
    if not any(removed.values()) and not expired:
        return f"nothing expired: the store starts at commitlog offset {store.min_offset()}"
    parts = [f"{n} {t} files" for t, n in removed.items() if n] + [f"{n} messages of {t}" for t, n in expired.items()]
    return (
        ", ".join(parts)
        + f" removed; the store starts at commitlog offset {store.min_offset()} (vacuum frees the bytes)"
    )


def _compact(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    progress.say("clustering settled commitlog data and merging small files")
    done = store.compact(args.full, settle_ms=args.settle_ms)
    changed = {t: r for t, r in done.items() if any(r)}
    if not changed:
        return "nothing to compact"
    return "compacted: " + ", ".join(f"{t} {r[0]} files -> {r[1]}" for t, r in changed.items())


def _vacuum(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    done = store.vacuum(args.retention_hours)
    if not any(done.values()):
        return "nothing to vacuum"
    return "deleted " + ", ".join(f"{n} {t} files" for t, n in done.items() if n)


def _inspect(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str | None:
    dispatched = store.dispatch_progress()
    rows = []
    for name, table in store.context.tables.by_name().items():
        view = table.view()
        actions = view.actions
        rows.append(
            {
                "table": name,
                "version": view.version,
                "files": actions.num_rows,
                "rows": int(pc.sum(actions.column("num_records")).as_py() or 0) if actions.num_rows else 0,
                "bytes": int(pc.sum(actions.column("size_bytes")).as_py() or 0) if actions.num_rows else 0,
                "dispatched_to": dispatched.get(name) if name != "commitlog" else None,
            }
        )
    ctx = store.context
    counts = {
        "topics": len(ctx.topics.all()),
        "groups": len(ctx.groups.all()),
        "subscriptions": len(ctx.registry.all()),
    }
    low, high = store.min_offset(), store.max_offset()
    if out.as_json:
        out.record({"tables": rows, "min_offset": low, "max_offset": high, "dispatch_progress": dispatched, **counts})
        return None
    out.table(rows)
    return f"commitlog offsets [{low}, {high}); " + ", ".join(f"{n} {k}" for k, n in counts.items())


def _verify(store: MessageStore | None, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    problems = MessageStore.verify(args.store, full=args.full, storage_options=dict(args.storage_options) or None)
    if problems:  # every one on stdout (a JSON list with --json), then the one line on stderr and exit 2
        if out.as_json:
            out.table([{"problem": p} for p in problems])
        else:
            for problem in problems:
                out.summary(f"problem: {problem}")
        raise StoreCorruptedError(problems, args.store)
    return "the store is sound" + (" (every commitlog offset read)" if args.full else "")


def _repair(store: MessageStore | None, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    repaired = MessageStore.repair(args.store, storage_options=dict(args.storage_options) or None)
    for line in repaired.lines():
        out.summary(line)
    if repaired.refused:
        raise StoreCorruptedError(repaired.refused, args.store)
    if not repaired.files:
        return "nothing to repair: no commitlog data file continues the log"
    return f"committed back {repaired.messages} messages in {len(repaired.files)} files"


def register(sub: "argparse._SubParsersAction") -> None:
    """Add the service and upkeep verbs to the command's parser.

    >>> sub = argparse.ArgumentParser().add_subparsers(); register(sub); sorted(sub.choices)
    ['check-transactions', 'compact', 'deliver', 'dispatch', 'inspect', 'repair', 'retention', 'vacuum', 'verify']
    """
    p = add_verb(
        sub,
        "dispatch",
        _dispatch,
        "Build consume queue, ext and index rows for everything new "
        "(ReputMessageService): small increments here with pyarrow, large ones as one Spark job.",
        writes=True,
        create=True,
        needs=[(option, "follow") for option in ("interval_ms", "round_ms", "serve_pulls", "compact_every_ms")],
    )
    p.add_argument("--follow", action="store_true", help="keep dispatching as messages arrive, until SIGTERM or SIGINT")
    p.add_argument("--interval-ms", type=positive_int, default=100, help="with --follow: wait between idle rounds")
    p.add_argument(
        "--round-ms",
        type=non_negative_int,
        default=ROUND_MS,
        help="with --follow: start a round at most this often (0: as soon as the last one ends); longer "
        "rounds cost consumers less CPU per message and add to each message's wait",
    )
    p.add_argument(
        "--serve-pulls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --follow: answer consumers' pulls of the queues' tails from memory (their tail_pulls "
        "setting), within tail_pulls_max_mb (default); --no-serve-pulls: consumers read the tables",
    )
    p.add_argument(
        "--compact-every-ms",
        type=non_negative_int,
        default=10_000,
        help="with --follow: merge the fresh small files of the commitlog, consume queue and index "
        "this often (0: never)",
    )
    for name, run, doc in (
        ("deliver", _deliver, "Deliver the delayed, timer and sent-back messages that are due, then dispatch them."),
        (
            "check-transactions",
            _check,
            "Ask producer groups' checkers about half messages past their timeout (check-back).",
        ),
    ):
        p = add_verb(sub, name, run, doc, writes=True, create=True)
        p.add_argument(
            "--now", type=time_ms, default=None, help="the time to act at, epoch ms or ISO 8601 (None: the clock)"
        )
    p = add_verb(
        sub,
        "retention",
        _retention,
        "Remove expired commitlog files, messages past their topic's "
        "retention_ms, then what pointed into them (CleanCommitLogService, CleanConsumeQueueService).",
        writes=True,
    )
    p.add_argument(
        "--reserved-hours",
        type=float,
        default=None,
        help="keep files this long after their newest message (None: the file_reserved_time setting, 72)",
    )
    p.add_argument(
        "--now", type=time_ms, default=None, help="the time to judge at, epoch ms or ISO 8601 (None: the clock)"
    )
    p = add_verb(
        sub,
        "compact",
        _compact,
        "Cluster settled commitlog data by each topic's keys and Bloom bitmaps, and merge small files (starts Spark).",
        writes=True,
    )
    p.add_argument("--full", action="store_true", help="also rewrite large files into sorted, disjoint ones")
    p.add_argument(
        "--settle-ms",
        type=non_negative_int,
        default=None,
        help="cluster messages older than this (None: the cluster_settle_ms setting)",
    )
    p = add_verb(
        sub,
        "vacuum",
        _vacuum,
        "Delete files no recent snapshot needs (Delta VACUUM), dead staging and orphan files.",
        writes=True,
    )
    p.add_argument("--retention-hours", type=non_negative_int, default=168, help="keep files younger than this")
    add_verb(
        sub,
        "inspect",
        _inspect,
        "The store's tables (versions, files, rows, bytes), dispatch progress, offsets and counts.",
    )
    p = add_verb(
        sub,
        "verify",
        _verify,
        "Check that the store is whole, also one that open refuses; a damaged store is exit code 2 with its problems.",
        opens=False,
    )
    p.add_argument("--full", action="store_true", help="also read every commitlog offset")
    add_verb(
        sub,
        "repair",
        _repair,
        "Commit back a lost tail: commitlog data files of acked sends whose log entries were lost (verify names "
        "them); their messages are checked first.",
        writes=True,
        opens=False,
    )
