"""``storelib topic create|update|list|delete|status`` and ``storelib group create|list`` (mqadmin's
``updateTopic``, ``topicList``, ``deleteTopic``, ``topicStatus``, ``updateSubGroup``, ``consumerGroupList``).

>>> from storelib.admin import main
>>> main(["topic", "create", "Orders", "--queues", "8", "--cluster-by", "TAGS", "region", "--store", store.root])
created topic Orders: 8 read / 8 write queues, perm RW-, clustered by TAGS,region
0
>>> main(["topic", "status", "TopicTest", "--store", store.root])   # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
queue_id  min_offset  max_offset  last_store_time          undispatched
--------  ----------  ----------  -----------------------  ------------
       0           0  ...
       3           0  ...
0
"""

from __future__ import annotations

import argparse
from typing import Any

from storelib.admin.command import add_verb
from storelib.admin.output import DISPATCH_HINT, Output, waiting_text
from storelib.cli import Progress, non_negative_int, positive_int
from storelib.consume.get_message import get_message
from storelib.model.group import GroupConfig
from storelib.model.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    UNCHANGED,
    TopicConfig,
    is_system_topic,
    perm_to_string,
)
from storelib.store import MessageStore

__all__ = ["register", "topic_row"]


def topic_row(config: TopicConfig) -> dict[str, Any]:
    """A topic as ``topic list`` shows it.

    >>> topic_row(TopicConfig("Orders", 8, 8))["perm"]
    'RW-'
    """
    return {
        "topic": config.topic,
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": perm_to_string(config.perm),
        "order": config.order,
        "cluster_by": list(config.cluster_by),
        "retention_ms": config.retention_ms,
    }


def _create(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    old = store.topic_config(args.topic) if args.verb == "topic update" else None  # an update: it must exist
    n = args.queues if args.queues is not None else store.config.default_topic_queue_nums
    read = args.read_queues or args.queues or (old.read_queue_nums if old else n)
    write = args.write_queues or args.queues or (old.write_queue_nums if old else n)
    perm = args.perm if args.perm is not None else (old.perm if old else PERM_READ | PERM_WRITE)
    order = args.order if args.order is not None else (old.order if old else False)
    retention = UNCHANGED if args.retention_ms is None else (None if args.retention_ms == 0 else args.retention_ms)
    c = store.create_topic(
        args.topic,
        read_queues=read,
        write_queues=write,
        perm=perm,
        order=order,
        cluster_by=args.cluster_by,
        retention_ms=retention,
    )
    did = "updated" if args.verb == "topic update" else "created"
    kept = f", messages kept {c.retention_ms} ms" if c.retention_ms else ""
    return (
        f"{did} topic {c.topic}: {c.read_queue_nums} read / {c.write_queue_nums} write queues, "
        f"perm {perm_to_string(c.perm)}, clustered by {','.join(c.cluster_by)}{kept}"
    )


def _list(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    topics = store.context.topics.all()
    shown = [
        t
        for t in sorted(topics)
        if args.system or not (is_system_topic(t) or t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)))
    ]
    out.table([topic_row(topics[t]) for t in shown], nothing="no topics in this store")


def _delete(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    store.delete_topic(args.topic)
    progress.committed(f"the deletion of topic {args.topic}", "rerunning finds no such topic and refuses")
    return f"deleted topic {args.topic} (its messages stay until retention removes them)"


def _status(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str | None:
    config = store.topic_config(args.topic)
    waiting = store.undispatched(args.topic)
    rows = []
    for q in range(config.read_queue_nums):
        max_offset = store.max_queue_offset(args.topic, q)
        last = None
        if max_offset:
            found = get_message(store.context, "", args.topic, q, max_offset - 1, 1)
            last = found.messages[0].store_timestamp if found.messages else None
        rows.append(
            {
                "queue_id": q,
                "min_offset": store.min_queue_offset(args.topic, q),
                "max_offset": max_offset,
                "last_store_time": last,
                "undispatched": waiting.get((args.topic, q), 0),
            }
        )
    out.table(rows)
    total = sum(waiting.values())
    if total and not out.as_json:
        return f"{waiting_text(total, args.topic)}, not counted in max_offset: {DISPATCH_HINT}"
    return None


def _group_create(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str:
    g = store.create_group(
        args.group,
        consume_enable=not args.consume_disable,
        consume_broadcast_enable=not args.broadcast_disable,
        retry_queue_nums=args.retry_queues,
        retry_max_times=args.retry_max_times,
    )
    return (
        f"created group {g.group_name}: consume {'enabled' if g.consume_enable else 'disabled'}, "
        f"retry up to {g.retry_max_times} times"
    )


def _group_list(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    groups = store.context.groups.all()
    fields = ("consume_enable", "consume_broadcast_enable", "retry_queue_nums", "retry_max_times")
    out.table(
        [{"group": g, **{f: getattr(groups[g], f) for f in fields}} for g in sorted(groups)],
        nothing="no consumer groups in this store",
    )


def register(sub: "argparse._SubParsersAction") -> None:
    """Add the ``topic`` and ``group`` verbs to the command's parser.

    >>> sub = argparse.ArgumentParser().add_subparsers(); register(sub); sorted(sub.choices)
    ['group', 'topic']
    """
    topic = sub.add_parser("topic", help="create, update, list, delete topics; a topic's queue offsets")
    verbs = topic.add_subparsers(title="topic verbs", metavar="VERB", required=True)
    defaults = GroupConfig("G")
    for name, doc in (
        ("create", "Create a topic, or update it (updateTopic)."),
        ("update", "Update an existing topic (updateTopic); a topic that does not exist is refused."),
    ):
        p = add_verb(
            verbs,
            name,
            _create,
            doc,
            writes=True,
            create=name == "create",
            prefix="topic",
            conflicts=[("queues", "read_queues"), ("queues", "write_queues")],
        )
        p.add_argument("topic", help="topic name")
        p.add_argument(
            "--queues",
            type=positive_int,
            default=None,
            help="read and write queues (None: the store's default_topic_queue_nums, or kept on update)",
        )
        p.add_argument("--read-queues", type=positive_int, default=None, help="read queues, if not --queues")
        p.add_argument("--write-queues", type=positive_int, default=None, help="write queues, if not --queues")
        p.add_argument(
            "--perm",
            type=non_negative_int,
            default=None,
            help="permission bits: 2 write, 4 read, 6 both (None: 6, or kept on update)",
        )
        p.add_argument(
            "--order", action="store_const", const=True, default=None, help="an ordered topic (kept on update)"
        )
        p.add_argument(
            "--cluster-by",
            nargs="+",
            default=None,
            metavar="KEY",
            help="clustering keys for compact(): TAGS and/or property names, at most 4 (None: TAGS, or kept)",
        )
        p.add_argument(
            "--retention-ms",
            type=non_negative_int,
            default=None,
            help="keep the topic's messages this long after their store time; 0: no per-topic retention "
            "(None: none for a new topic, kept on update)",
        )
    p = add_verb(
        verbs,
        "list",
        _list,
        "List the topics with their queues, permission and clustering keys (topicList).",
        prefix="topic",
    )
    p.add_argument("--system", action="store_true", help="also list %%RETRY%%, %%DLQ%% and system topics")
    p = add_verb(
        verbs,
        "delete",
        _delete,
        "Delete a topic's configuration (deleteTopic); its messages stay until retention removes them.",
        writes=True,
        prefix="topic",
    )
    p.add_argument("topic", help="topic name")
    p = add_verb(
        verbs,
        "status",
        _status,
        "Each queue's min and max offset (the next offset), last store time, and messages waiting for dispatch "
        "(topicStatus).",
        prefix="topic",
    )
    p.add_argument("topic", help="topic name")

    group = sub.add_parser("group", help="create and list consumer groups")
    verbs = group.add_subparsers(title="group verbs", metavar="VERB", required=True)
    p = add_verb(
        verbs,
        "create",
        _group_create,
        "Create or update a consumer group (updateSubGroup).",
        writes=True,
        create=True,
        prefix="group",
    )
    p.add_argument("group", help="consumer group name")
    p.add_argument("--consume-disable", action="store_true", help="refuse the group's pulls (consumeEnable=false)")
    p.add_argument("--broadcast-disable", action="store_true", help="consumeBroadcastEnable=false")
    p.add_argument("--retry-queues", type=positive_int, default=defaults.retry_queue_nums, help="retryQueueNums")
    p.add_argument(
        "--retry-max-times",
        type=non_negative_int,
        default=defaults.retry_max_times,
        help="retries before a message goes to %%DLQ%%",
    )
    add_verb(
        verbs, "list", _group_list, "List the consumer groups and their settings (consumerGroupList).", prefix="group"
    )
