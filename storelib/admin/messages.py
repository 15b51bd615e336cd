"""``storelib send``, ``storelib pull`` and ``storelib query id|key|unique-key|offset`` (mqadmin's
``sendMessage``, ``queryMsgById``, ``queryMsgByKey``, ``queryMsgByUniqueKey``, ``queryMsgByOffset``).

``send --file`` takes JSON lines, one message each: ``topic`` (else the command's), ``body`` (text) or
``body_base64``, ``tags``, ``keys`` (a list or a space-separated string), ``properties``, ``queue_id``,
``flag``, ``delay_level``, ``deliver_time_ms``. All lines go in one atomic commit: a bad line is
refused with its line number and nothing is sent.

>>> from storelib.admin import main
>>> main(["query", "key", "TopicTest", "order-1", "--store", store.root])   # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
msg_id                            queue_id  queue_offset  tags  keys     store_time               body
--------------------------------  --------  ------------  ----  -------  -----------------------  ----
7F00000100002A9F0000000000000000  ...  0  TagA  order-1  ...  hi
0
>>> main(["query", "key", "TopicTest", "no-such-key", "--store", store.root])
1
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any, cast

from storelib.admin.command import add_verb
from storelib.admin.output import DISPATCH_HINT, Output, message_record, message_row, note_waiting
from storelib.cli import NothingFound, Progress, non_negative_int, positive_int, time_ms
from storelib.consume.get_message import GetMessageStatus, get_message
from storelib.filter.selector import MessageSelector
from storelib.model.errors import MessageError, MessageNotFoundError, StoreError
from storelib.model.message import Message
from storelib.store import MessageStore

__all__ = ["register", "read_messages_file", "MESSAGE_FIELDS"]

#: What a line of ``send --file`` may hold.
MESSAGE_FIELDS = (
    "topic",
    "body",
    "body_base64",
    "tags",
    "keys",
    "properties",
    "queue_id",
    "flag",
    "delay_level",
    "deliver_time_ms",
)

#: The options that make the one test message: a file's lines say all of it instead.
_ONE_MESSAGE_OPTIONS = ("body", "tags", "keys", "property", "queue_id", "delay_level", "deliver_time_ms", "count")

#: Sends of more messages than this print one summary line, not a row per message (``--json`` prints all).
SHOWN_RESULTS = 20


def read_messages_file(path: str, topic: str | None = None) -> list[Message]:
    """The messages of a JSON-lines file (see the module docstring), each with its line number as
    ``line_of[message index]`` on the list; a bad line raises :class:`~storelib.model.errors.MessageError`
    naming the file and line.

    >>> p = tmp + "/m.jsonl"; _ = open(p, "w").write('{"body": "a", "tags": "TagA"}\\n{"body": "b", "colour": 1}\\n')
    >>> read_messages_file(p, "TopicTest")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.MessageError: colour: is not a message field; the fields are topic, body, ...
        [at .../m.jsonl line 2]
    """
    messages = _Lines()
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MessageError("file", f"cannot read {path}: {e}") from None
    name = "stdin" if path == "-" else path
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise MessageError("file", f"is not JSON ({e.msg} at column {e.colno})", where=where) from None
        if not isinstance(record, dict):
            raise MessageError("file", "must be a JSON object, one message per line", where=where)
        try:
            messages.append(_message(record, topic))
        except StoreError as e:
            raise _at(e, where) from None
        messages.line_of.append(n)
    if not messages:  # refused, not "nothing found": the input is what is wrong
        raise MessageError("file", "holds no message: one JSON object per line", where=name)
    return messages


class _Lines(list):
    """Messages read from a file, with the line each came from."""

    def __init__(self) -> None:
        super().__init__()
        self.line_of: list[int] = []


def _at(e: StoreError, where: str) -> StoreError:
    return type(e)(e.field, e.reason, where=where, **({} if e.value is None else {"value": e.value}))


def _message(record: dict[str, Any], topic: str | None) -> Message:
    unknown = sorted(set(record) - set(MESSAGE_FIELDS))
    if unknown:
        raise MessageError(unknown[0], f"is not a message field; the fields are {', '.join(MESSAGE_FIELDS)}")
    if "body" in record and "body_base64" in record:
        raise MessageError("body", "give body or body_base64, not both")
    body = record.get("body", "")
    if "body_base64" in record:
        try:
            body = base64.b64decode(record["body_base64"], validate=True)
        except (ValueError, TypeError):
            raise MessageError("body_base64", "is not base64", value=record["body_base64"]) from None
    elif not isinstance(body, str):
        raise MessageError("body", "must be a string (or use body_base64)", value=body)
    target = record.get("topic", topic)
    if target is None:
        raise MessageError("topic", "is missing: give it on the line or as the command's TOPIC")
    return Message(
        target,
        body.encode() if isinstance(body, str) else body,
        record.get("tags"),
        record.get("keys"),
        record.get("properties") or {},
        record.get("flag", 0),
        record.get("queue_id"),
        record.get("delay_level", 0),
        record.get("deliver_time_ms"),
    )


def _send(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> str | None:
    if args.file:
        messages = read_messages_file(args.file, args.topic)
    else:
        if args.topic is None:
            raise MessageError("topic", "is missing: give TOPIC or --file")
        props = {}
        for item in args.property or ():
            key, sep, value = item.partition("=")
            if not sep:
                raise MessageError("property", "must be KEY=VALUE", value=item)
            props[key] = value
        one = _message(
            {
                "body": args.body,
                "tags": args.tags,
                "keys": args.keys,
                "properties": props,
                "queue_id": args.queue_id,
                "delay_level": args.delay_level,
                "deliver_time_ms": args.deliver_time_ms,
            },
            args.topic,
        )
        messages = [one] * args.count
    try:
        results = store.send_batch(messages)
    except StoreError as e:  # the producer names "message i": say which line of the file it was
        index = (e.where or "message 0").removeprefix("message ") if args.file else ""
        if not index.isdigit():
            raise
        lines = cast(_Lines, messages)  # args.file: read_messages_file's
        raise _at(e, f"{args.file} line {lines.line_of[int(index)]}") from None
    topics = sorted({r.topic for r in results})
    progress.committed(
        f"{len(results)} messages sent to {', '.join(topics)} (commitlog offsets from {results[0].commitlog_offset})",
        "rerunning sends them again; 'storelib query key' or 'query id' shows what is stored",
    )
    fields = ("send_status", "msg_id", "uniq_key", "topic", "queue_id", "queue_offset")
    if out.as_json or len(results) <= SHOWN_RESULTS:
        out.table([{f: getattr(r, f) for f in fields} for r in results])
        return None
    return f"sent {len(results)} messages (SEND_OK) in one commit, commitlog offsets {results[0].commitlog_offset}.."


def _pull(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    selector = MessageSelector.by_sql(args.sql) if args.sql else args.tag
    offset = args.offset
    if offset is None:
        offset = max(0, store.committed_offset(args.group, args.topic, args.queue_id))
    p = store.pull(
        args.group, args.topic, args.queue_id, offset, args.max, selector=selector, suspend_timeout_ms=args.wait_ms
    )
    if args.commit and p.next_begin_offset != offset:
        store.commit_offset(args.group, args.topic, args.queue_id, p.next_begin_offset)
        progress.committed(
            f"{args.group}'s offset of {args.topic} queue {args.queue_id}: {p.next_begin_offset}",
            f"rerunning pulls from {p.next_begin_offset}, past what this pull took; pull those again with OFFSET "
            f"{offset} (without --commit)",
        )
    head = {
        "status": str(p.status),
        "get_status": str(p.get_status),
        "next_begin_offset": p.next_begin_offset,
        "min_offset": p.min_offset,
        "max_offset": p.max_offset,
        "messages": len(p.messages),
    }
    if out.as_json:
        out.record({**head, "messages": [message_record(m) for m in p.messages]})
        return
    out.summary(" ".join(f"{k}={v}" for k, v in head.items()))
    if p.messages:
        out.table([message_row(m) for m in p.messages])


def _query_id(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    found = _found(lambda: store.query_by_id(args.msg_id))
    out.record(message_record(found))
    note_waiting(store.undispatched(found.topic), found.topic)


def _query_unique(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    out.record(message_record(_found(lambda: store.query_by_unique_key(args.topic, args.uniq_key))))
    note_waiting(store.undispatched(args.topic), args.topic)


def _found(find):
    try:
        return find()
    except MessageNotFoundError as e:
        raise NothingFound(str(e)) from None


def _query_key(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    found = store.query_by_key(args.topic, args.key, args.max, begin=args.begin, end=args.end)
    out.table(
        [message_record(m) if out.as_json else message_row(m) for m in found],
        nothing=f"no message of topic {args.topic} has key {args.key!r}",
    )
    note_waiting(store.undispatched(args.topic), args.topic)


def _query_offset(store: MessageStore, args: argparse.Namespace, out: Output, progress: Progress) -> None:
    store.topic_config(args.topic)
    g = get_message(store.context, "", args.topic, args.queue_id, args.offset, 1)
    if g.status != GetMessageStatus.FOUND or not g.messages:
        waiting = store.undispatched(args.topic).get((args.topic, args.queue_id), 0)
        more = (
            f"; {waiting} more {'waits' if waiting == 1 else 'wait'} for dispatch: {DISPATCH_HINT}" if waiting else ""
        )
        raise NothingFound(
            f"no message at queue offset {args.offset} of {args.topic} queue {args.queue_id} "
            f"({g.status}; the queue holds [{g.min_offset}, {g.max_offset}){more})"
        )
    out.record(message_record(g.messages[0]))


def register(sub: "argparse._SubParsersAction") -> None:
    """Add ``send``, ``pull`` and the ``query`` verbs to the command's parser.
    >>> sub = argparse.ArgumentParser().add_subparsers(); register(sub); sorted(sub.choices)
    ['pull', 'query', 'send']
    """
    p = add_verb(
        sub,
        "send",
        _send,
        "Send a test message, or every message of a JSON-lines file, in one commit "
        "(sendMessage).\n\n" + __doc__.split("\n\n")[1],
        writes=True,
        conflicts=[("delay_level", "deliver_time_ms")] + [("file", f) for f in _ONE_MESSAGE_OPTIONS],
    )
    p.add_argument("topic", nargs="?", default=None, help="topic (a file's lines may name their own)")
    p.add_argument("--body", default="Hello storelib", help="message body (text)")
    p.add_argument("--tags", default=None, help="message tag")
    p.add_argument("--keys", nargs="+", default=None, metavar="KEY", help="message keys")
    p.add_argument("--property", action="append", metavar="KEY=VALUE", help="a user property (repeatable)")
    p.add_argument("--queue-id", type=non_negative_int, default=None, help="queue to send to (None: round robin)")
    p.add_argument("--delay-level", type=non_negative_int, default=0, help="delay level 1..18 (0: none)")
    p.add_argument(
        "--deliver-time-ms", type=time_ms, default=None, help="deliver at this time: epoch ms or ISO 8601 (UTC)"
    )
    p.add_argument("--count", type=positive_int, default=1, help="send the message this many times")
    p.add_argument(
        "--file", default=None, help="a JSON-lines file of messages instead of one test message ('-': standard input)"
    )

    p = add_verb(
        sub,
        "pull",
        _pull,
        "Pull messages of one queue as a consumer of GROUP does, with RocketMQ's statuses and offsets.",
        conflicts=[("tag", "sql")],
    )
    p.add_argument("group", help="consumer group")
    p.add_argument("topic", help="topic")
    p.add_argument("queue_id", type=non_negative_int, help="queue id")
    p.add_argument(
        "offset",
        type=non_negative_int,
        nargs="?",
        default=None,
        help="queue offset to pull from (None: the group's committed offset, else 0)",
    )
    p.add_argument("--max", type=positive_int, default=32, help="most messages to return")
    p.add_argument("--tag", default=None, help="tag expression of this pull (None: the group's subscription)")
    p.add_argument("--sql", default=None, help="SQL92 expression of this pull (None: the group's subscription)")
    p.add_argument("--wait-ms", type=non_negative_int, default=0, help="long polling: wait this long for new messages")
    p.add_argument("--commit", action="store_true", help="commit the next begin offset for the group")

    query = sub.add_parser("query", help="find messages by id, key, unique key or queue offset")
    verbs = query.add_subparsers(title="query verbs", metavar="VERB", required=True)
    p = add_verb(verbs, "id", _query_id, "The message with this store message id (queryMsgById).", prefix="query")
    p.add_argument("msg_id", help="store message id (offset msg id)")
    p = add_verb(
        verbs, "key", _query_key, "Messages of a topic with this key, newest first (queryMsgByKey).", prefix="query"
    )
    p.add_argument("topic", help="topic")
    p.add_argument("key", help="message key")
    p.add_argument("--max", type=positive_int, default=64, help="most messages to return (at most 64)")
    p.add_argument("--begin", type=time_ms, default=None, help="earliest store time: epoch ms or ISO 8601 (UTC)")
    p.add_argument("--end", type=time_ms, default=None, help="latest store time: epoch ms or ISO 8601 (UTC)")
    p = add_verb(
        verbs,
        "unique-key",
        _query_unique,
        "The message with this unique key, the client's message id (queryMsgByUniqueKey).",
        prefix="query",
    )
    p.add_argument("topic", help="topic")
    p.add_argument("uniq_key", help="UNIQ_KEY (the client's msgId)")
    p = add_verb(verbs, "offset", _query_offset, "The message at a queue offset (queryMsgByOffset).", prefix="query")
    p.add_argument("topic", help="topic")
    p.add_argument("queue_id", type=non_negative_int, help="queue id")
    p.add_argument("offset", type=non_negative_int, help="queue offset")
