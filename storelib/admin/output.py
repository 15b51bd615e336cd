"""How the ``storelib`` command shows what it found: a readable table by default, JSON with ``--json``.

Rows are plain dicts. In a table, long values are cut to fit a terminal and times are UTC times with
milliseconds; JSON keeps every value whole, and times are epoch milliseconds.
Nothing found is said (:class:`NothingFound`), never shown as an empty table.

>>> out = Output()
>>> out.table([{"topic": "TopicTest", "queues": 4}, {"topic": "Orders", "queues": 16}])
topic      queues
---------  ------
TopicTest       4
Orders         16
>>> Output(as_json=True).table([{"topic": "TopicTest", "queues": 4}])
[{"topic": "TopicTest", "queues": 4}]
>>> out.record({"Topic": "TopicTest", "Queue ID": 1})
Topic:     TopicTest
Queue ID:  1
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Mapping, Sequence

from storelib.cli import NothingFound
from storelib.model.message import StoredMessage

__all__ = [
    "Output",
    "message_record",
    "message_row",
    "text_of",
    "epoch_ms",
    "DISPATCH_HINT",
    "note_waiting",
    "waiting_text",
]

#: What makes sent messages visible to pulls, queue offsets and lag.
DISPATCH_HINT = "run 'storelib dispatch' (or keep 'storelib dispatch --follow' running)"

#: Widest a table cell gets before it is cut (``…`` marks the cut).
MAX_CELL = 48


@dataclass
class Output:
    """Where and how a verb prints its answer: tables and records as text, or as one JSON document."""

    as_json: bool = False
    stream: IO[str] | None = None
    #: Lines said so far in JSON mode: a verb's summary lines join the document under ``"summary"``.
    said: list[str] = field(default_factory=list)

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def table(
        self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, *, nothing: str = "nothing found"
    ) -> None:
        """Rows as a table (columns: ``columns``, else the first row's keys); no rows raises :class:`NothingFound`.

        >>> Output().table([], nothing="no topics in this store")
        Traceback (most recent call last):
        ...
        storelib.cli.NothingFound: no topics in this store
        """
        if not rows:
            raise NothingFound(nothing)
        if self.as_json:
            self._print(json.dumps([_jsonable(dict(r)) for r in rows], ensure_ascii=False))
            return
        columns = list(columns or rows[0].keys())
        cells = [[_cell(r.get(c)) for c in columns] for r in rows]
        numeric = [
            all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows) for c in columns
        ]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

        def line(values: Iterable[str]) -> str:
            return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

        self._print(line(columns))
        self._print("  ".join("-" * w for w in widths))
        for row in cells:
            self._print(line(row))

    def record(self, values: Mapping[str, Any]) -> None:
        """One thing, field by field (as ``mqadmin queryMsgById`` prints a message)."""
        if self.as_json:
            self._print(json.dumps(_jsonable(dict(values)), ensure_ascii=False))
            return
        width = max(len(k) for k in values) + 2
        for key, value in values.items():
            self._print(f"{key + ':':<{width}} {text_of(value)}".rstrip())

    def summary(self, text: str, **data: Any) -> None:
        """One line saying what was done; in JSON mode, ``{"summary": text, **data}``.

        >>> Output(as_json=True).summary("created topic Orders", topic="Orders")
        {"summary": "created topic Orders", "topic": "Orders"}
        """
        if self.as_json:
            self._print(json.dumps(_jsonable({"summary": text, **data}), ensure_ascii=False))
        else:
            self._print(text)


def note_waiting(waiting: Mapping[tuple[str, int], int], topic: str, stream: IO[str] | None = None) -> None:
    """Say on stderr how many messages sent to ``topic`` wait for dispatch (``waiting``:
    ``MessageStore.undispatched``), if any: a look-up finds them, pulls and queue offsets do not yet.

    >>> note_waiting({("Orders", 0): 2, ("Orders", 3): 1}, "Orders", sys.stdout)   # doctest: +ELLIPSIS
    note: 3 messages sent to Orders wait for dispatch (look-ups find them; pulls, ...): run 'storelib dispatch' ...
    """
    n = sum(count for (t, _), count in waiting.items() if t == topic)
    if n:
        print(
            f"note: {waiting_text(n, topic)} (look-ups find them; pulls, topic status and lag do not yet): "
            f"{DISPATCH_HINT}",
            file=stream or sys.stderr,
        )


def waiting_text(n: int, topic: str) -> str:
    """How many messages wait for dispatch, in words.

    >>> waiting_text(1, "Orders"), waiting_text(3, "Orders")
    ('1 message sent to Orders waits for dispatch', '3 messages sent to Orders wait for dispatch')
    """
    return (
        f"{n} message sent to {topic} waits for dispatch"
        if n == 1
        else f"{n} messages sent to {topic} wait for dispatch"
    )


def text_of(value: Any) -> str:
    """A value as a table or record shows it: times in UTC with milliseconds, maps as ``k=v``, lists joined,
    bytes as text when they are UTF-8, else as base64.

    >>> text_of(dt.datetime(2026, 11, 25, 6, 30, tzinfo=dt.timezone.utc)), text_of({"a": "1", "b": "2"}), text_of(None)
    ('2026-11-25 06:30:00.000', 'a=1 b=2', '')
    >>> text_of(b"hi"), text_of(bytearray([255, 0]))
    ('hi', '/wA=')
    """
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return _body(bytes(value))[0]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if isinstance(value, Mapping):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(text_of(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cell(value: Any) -> str:
    text = text_of(value).replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def epoch_ms(value: dt.datetime) -> int:
    """A time as JSON shows it: epoch milliseconds (a time without a zone is taken as UTC).

    >>> epoch_ms(dt.datetime(2026, 11, 25, 6, 30, 0, 123456, tzinfo=dt.timezone.utc))
    1795588200123
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return (value - _EPOCH) // dt.timedelta(milliseconds=1)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return epoch_ms(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _body(body: bytes) -> tuple[str, str]:
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode(), "base64"


def message_record(m: StoredMessage) -> dict[str, Any]:
    """Everything about a stored message, named as ``mqadmin queryMsgById`` names it; the body as
    text, or base64 when it is not UTF-8 (``Body Encoding`` says which).

    >>> rec = message_record(store.query_by_id(r.msg_id))
    >>> rec["Topic"], rec["Tags"], rec["Body"], rec["Body Encoding"]
    ('TopicTest', 'TagA', 'hi', 'utf-8')
    """
    body, encoding = _body(m.body)
    return {
        "OffsetID": m.msg_id,
        "Topic": m.topic,
        "Tags": m.tags,
        "Keys": m.keys,
        "Unique Key": m.uniq_key,
        "Queue ID": m.queue_id,
        "Queue Offset": m.queue_offset,
        "CommitLog Offset": m.commitlog_offset,
        "Size": m.size,
        "Reconsume Times": m.reconsume_times,
        "Born Timestamp": m.born_timestamp,
        "Store Timestamp": m.store_timestamp,
        "Born Host": m.born_host,
        "Store Host": m.store_host,
        "System Flag": m.sysflag,
        "Flag": m.flag,
        "Properties": dict(m.properties),
        "Body": body,
        "Body Encoding": encoding,
    }


def message_row(m: StoredMessage) -> dict[str, Any]:
    """A stored message as one row of a table of messages.

    >>> sorted(message_row(store.query_by_id(r.msg_id)))[:4]
    ['body', 'keys', 'msg_id', 'queue_id']
    """
    body, _ = _body(m.body)
    return {
        "msg_id": m.msg_id,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "tags": m.tags,
        "keys": m.keys,
        "store_time": m.store_timestamp,
        "body": body,
    }
