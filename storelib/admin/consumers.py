"""``storelib subscribe|unsubscribe|subscriptions`` and ``storelib consumer progress|lag`` (mqadmin's
``consumerProgress``, and the dashboard's subscription and lag views).

>>> from storelib.admin import main
>>> main(["subscribe", "GroupB", "TopicTest", "--sql", "a > 3", "--store", store.root])   # doctest: +ELLIPSIS
subscribed GroupB to TopicTest: SQL92 a > 3 (version ...)
0
>>> main(["consumer", "progress", "GroupA", "--store", store.root])   # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
topic          queue_id  max_offset  committed_offset  lag
-------------  --------  ----------  ----------------  ---
%RETRY%GroupA         0           0                 0    0
TopicTest             0  ...
TopicTest             3  ...
total lag: 1
0
"""

from __future__ import annotations

import argparse
from typing import Any

from storelib.admin.command import add_verb
from storelib.admin.output import Output
from storelib.cli import NothingFound, Progress
from storelib.consume.offsets import consumer_lag_rows
from storelib.filter.selector import MessageSelector
from storelib.store import MessageStore

__all__ = ["register"]

LAG_COLUMNS = ("topic", "queue_id", "max_offset", "committed_offset", "lag")


def _selector(args: argparse.Namespace) -> MessageSelector | str:
    if args.sql is not None:
        return MessageSelector.by_sql(args.sql)
    if args.filter_class is not None:
        return MessageSelector.by_class(args.filter_class, args.tag)
    return MessageSelector.by_tag(args.tag)


def _subscribe(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    s = store.subscribe(args.group, args.topic, _selector(args))
    return (
        f"subscribed {s.group} to {s.topic}: {s.selector.expression_type} {s.selector.expression} (version {s.version})"
    )


def _unsubscribe(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    if not store.unsubscribe(args.group, args.topic):
        raise NothingFound(f"group {args.group} has no subscription to {args.topic}")
    return f"unsubscribed {args.group} from {args.topic}"


def _subscriptions(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    subs = [
        s
        for s in store.context.registry.all()
        if (args.group is None or s.group == args.group) and (args.topic is None or s.topic == args.topic)
    ]
    rows = []
    for s in sorted(subs, key=lambda s: (s.group, s.topic)):
        row = {
            "group": s.group,
            "topic": s.topic,
            "type": s.selector.expression_type,
            "expression": s.selector.expression,
            "version": s.version,
        }
        if args.stats:
            progress.say(f"counting what {s.group}'s filter does on {s.topic}")
            f = store.filter_stats(s.group, s.topic)
            row.update(
                checked=f.checked,
                skipped_by_file=f.skipped_by_file,
                pruned_by_bitmap=f.pruned_by_bitmap,
                passed=f.passed_consume_queue,
                no_bitmap=f.no_bitmap,
                matched=f.matched,
                false_positives=f.false_positives,
                spark_sql=f.spark_sql,
            )
        rows.append(row)
    which = " ".join(
        filter(None, [f"of group {args.group}" if args.group else "", f"to topic {args.topic}" if args.topic else ""])
    )
    out.table(rows, nothing=f"no subscriptions {which}".strip())


def _progress(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str | None:
    rows: list[dict[str, Any]] = [dict(zip(LAG_COLUMNS, r)) for r in consumer_lag_rows(store.context, args.group)]
    out.table(rows, nothing=f"group {args.group} reads no queue: no subscription and no committed offset")
    return None if out.as_json else f"total lag: {sum(r['lag'] for r in rows)}"


def _lag(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    groups = (
        [args.group]
        if args.group
        else sorted(set(store.context.groups.all()) | {s.group for s in store.context.registry.all()})
    )
    rows = []
    for group in groups:
        per_topic: dict[str, list[int]] = {}
        for topic, _, max_offset, committed, lag in consumer_lag_rows(store.context, group):
            t = per_topic.setdefault(topic, [0, 0, 0, 0])
            t[0] += 1
            t[1] += max_offset
            t[2] += committed
            t[3] += lag
        rows += [
            {"group": group, "topic": topic, "queues": q, "max_offset_sum": m, "committed_sum": c, "lag": lag}
            for topic, (q, m, c, lag) in sorted(per_topic.items())
        ]
    out.table(rows, nothing="no consumer group reads any queue")


def register(sub: "argparse._SubParsersAction") -> None:
    """Add the subscription and consumer verbs to the command's parser.

    >>> sub = argparse.ArgumentParser().add_subparsers(); register(sub); sorted(sub.choices)
    ['consumer', 'subscribe', 'subscriptions', 'unsubscribe']
    """
    for name, run, doc in (
        ("subscribe", _subscribe, "Register GROUP's subscription to TOPIC: a tag expression, SQL92 or a filter class."),
        ("unsubscribe", _unsubscribe, "Remove GROUP's subscription to TOPIC."),
    ):
        conflicts = [("tag", "sql"), ("sql", "filter_class")] if name == "subscribe" else []
        p = add_verb(sub, name, run, doc, writes=True, conflicts=conflicts)
        p.add_argument("group", help="consumer group")
        p.add_argument("topic", help="topic")
        if name == "subscribe":
            p.add_argument("--tag", default=None, help="tag expression, e.g. 'TagA || TagB' (None: every message)")
            p.add_argument("--sql", default=None, help="SQL92 expression over properties, e.g. \"region = 'eu'\"")
            p.add_argument("--filter-class", default=None, help="filter class 'package.module:Class'")
    p = add_verb(
        sub, "subscriptions", _subscriptions, "List subscriptions; --stats counts what each filter does (starts Spark)."
    )
    p.add_argument("--group", default=None, help="only this group's")
    p.add_argument("--topic", default=None, help="only subscriptions to this topic")
    p.add_argument("--stats", action="store_true", help="add filter statistics: units checked, pruned, matched")

    consumer = sub.add_parser("consumer", help="a consumer group's progress and lag")
    verbs = consumer.add_subparsers(title="consumer verbs", metavar="VERB", required=True)
    p = add_verb(
        verbs,
        "progress",
        _progress,
        "Per queue: max offset (the next offset), committed offset and lag (consumerProgress).",
        prefix="consumer",
    )
    p.add_argument("group", help="consumer group")
    p = add_verb(verbs, "lag", _lag, "Lag per group and topic, of every group or one.", prefix="consumer")
    p.add_argument("group", nargs="?", default=None, help="one group (None: every group)")
