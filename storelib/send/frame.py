"""The Arrow half of a DataFrame send: what the executors do to each batch of a partition before
it is staged. Each batch is checked with the send rules of :mod:`storelib.model.validation` as
whole-batch Arrow and numpy operations (topics and property names once per distinct value), and
completed into commitlog rows: defaults, queue ids, UNIQ_KEYs, the properties map and the size.
A refused row travels to the driver as its error record, never as text to parse.

>>> keys = UniqKeys("0A0000010001", "nonce", 5).for_rows(0, 0, 2).to_pylist()
>>> [len(k) for k in keys], keys[0][:12], keys[0][-12:], keys[1][-12:]
([32, 32], '0A0000010001', '000000050000', '000000050001')
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Mapping, Sequence, Union, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.encoding.arrow import Distinct, matches, utf8_lengths
from storelib.encoding.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from storelib.encoding.record import message_lengths
from storelib.encoding.uniq_id import uniq_ids
from storelib.model.errors import StoreError
from storelib.model.message import BLANK_ENTRY_PATTERN, PROPERTY_JOIN, RESERVED_PROPERTIES, MessageConst, SysFlag
from storelib.model.topic import TopicConfig, validate_topic
from storelib.model.validation import (
    BLANK_PROPERTY,
    BODY_NULL,
    BODY_TOO_LARGE,
    FLAG_RANGE,
    KEYS_SEPARATORS,
    KEYS_TYPE,
    PROPERTY_SEPARATORS,
    QUEUE_ID_RANGE,
    RESERVED_PROPERTY,
    TAGS_SEPARATORS,
    check_send_topic,
)
from storelib.storage.schema import COMMITLOG

__all__ = ["EncodedFrame", "UniqKeys", "BatchTopics", "NULL_KEY"]

#: Why rows are refused: one record (an error as JSON) for every row the check hits, or one per distinct value of
#: a column (a topic, a set of property names) with each row's index among them.
_Record = Union[str, tuple[Sequence[str | None], np.ndarray]]


@dataclass(frozen=True)
class UniqKeys:
    """RocketMQ-shaped UNIQ_KEYs for the rows of one DataFrame send, made on the executors: the
    host and pid prefix, a salt per send and partition, then milliseconds since the month's start
    (<< 16) plus the row's index in its partition, all upper-case hex (32 characters).

    >>> keys = UniqKeys("0A0000010001", "nonce", 5).for_rows(0, 0, 2).to_pylist()
    >>> [len(k) for k in keys], keys[0][:12], keys[0][-12:], keys[1][-12:]
    ([32, 32], '0A0000010001', '000000050000', '000000050001')
    """

    prefix: str
    nonce: str
    since_month_ms: int

    def for_rows(self, partition: int, first_row: int, n: int) -> pa.Array:
        salt = zlib.crc32(f"{self.nonce}/{partition}".encode())
        tail = ((self.since_month_ms << 16) + first_row + np.arange(n, dtype=np.int64)) % (1 << 48)
        return uniq_ids(f"{self.prefix}{salt:08X}", tail)


@dataclass(frozen=True)
class BatchTopics:
    """A batch's distinct topics (the last entry of each list stands for a null topic), checked once
    each: the refusal of the topic's name (``validate_topic``), of its use (unknown, not writable,
    reserved for the store), as error records or None, each topic's write queue count, and the
    refusal of a queue id outside its write queues."""

    distinct: Distinct
    name_refusals: list[str | None]
    use_refusals: list[str | None]
    queues: np.ndarray
    queue_refusals: list[str]


def _record(error: StoreError) -> str:
    """An error as it travels from the executors: its record as JSON (see
    :func:`~storelib.model.errors.error_from_record`)."""
    return json.dumps(error.to_record())


@dataclass(frozen=True)
class EncodedFrame:
    """The executors' half of a DataFrame send: they check the rows
    :meth:`~storelib.send.producer.Producer.encode_dataframe` sends (the rules of
    :mod:`storelib.model.validation`, as Arrow batch operations) and complete them into commitlog rows:
    ``defaults`` for the columns the DataFrame did not have, the queue where the row names none, the
    UNIQ_KEY, the properties map and the size.

    >>> from storelib.model.topic import TopicConfig
    >>> frame = EncodedFrame({"sysflag": 0, "flag": 0}, UniqKeys("0A0000010001", "nonce", 5), {"T": TopicConfig("T")},
    ...                      max_body=10)
    >>> batch = pa.RecordBatch.from_pydict({"topic": ["T", "U"], "body": [b"x", b"y"], "tags": pa.nulls(2, pa.string()),
    ...     "keys": pa.nulls(2, pa.string()), "property_names": pa.nulls(2, pa.string()),
    ...     "property_values": pa.nulls(2, pa.string()), "property_count": pa.array([0, 0], pa.int32())})
    >>> topics = frame.topics_of(batch)
    >>> [r and json.loads(r)["error"] for r in frame.refusals(batch, topics).to_pylist()]
    [None, 'TopicNotFoundError']
    >>> good = batch.slice(0, 1)
    >>> cols = frame.complete(good, 0, 0, frame.topics_of(good))
    >>> cols["size"].to_pylist(), [k for k, _ in cols["properties"][0].as_py()]
    ([135], ['UNIQ_KEY'])
    """

    defaults: Mapping[str, object]
    uniq: UniqKeys
    topics: Mapping[str, TopicConfig]
    max_body: int
    queue_salt: int = 0
    store_v6: bool = False
    keys_array: bool = False

    def topics_of(self, batch: pa.RecordBatch) -> BatchTopics:
        """The batch's distinct topics, each checked once (see :class:`BatchTopics`)."""
        topics = Distinct.of(batch.column("topic"))
        names, uses, queues, ranges = [], [], [], []
        for topic in topics.values.to_pylist() + [None]:
            name = use = None
            n = 1
            try:
                validate_topic(topic)
            except StoreError as e:
                name = _record(e)
            try:
                n = check_send_topic(self.topics, topic).write_queue_nums
            except StoreError as e:
                use = _record(e)
            names.append(name)
            uses.append(use)
            queues.append(n)
            ranges.append(_record(QUEUE_ID_RANGE.error(queues=n, topic=topic)))
        return BatchTopics(topics, names, uses, np.array(queues, dtype=np.int64), ranges)

    def refusals(self, batch: pa.RecordBatch, topics: BatchTopics | None = None) -> pa.Array:
        """Why each row is refused (the first failing rule's error record, as JSON), or null.

        The rules and their order are :data:`~storelib.model.validation.SEND_RULES`, the list path's:
        the topic's name, the body, tags and keys, the properties, then the topic's use and the queue
        id's range. Topics and property names are checked once per distinct value, since a
        DataFrame's rows mostly share them.
        """
        n = batch.num_rows
        topics = topics or self.topics_of(batch)
        body = batch.column("body")
        queue_id = batch.column("queue_id") if "queue_id" in batch.schema.names else pa.nulls(n, pa.int32())
        given = pc.is_valid(queue_id).to_numpy(zero_copy_only=False)
        qid = pc.fill_null(queue_id, 0).to_numpy(zero_copy_only=False)
        flag = batch.column("flag") if "flag" in batch.schema.names else pa.nulls(n, pa.int64())
        flag = pc.fill_null(flag, 0).to_numpy(zero_copy_only=False)
        keys = batch.column("keys")
        keys_separators = _separators(keys)
        null_keys = np.zeros(n, dtype=bool)
        if self.keys_array and keys_separators.any():
            null_keys = matches(pc.match_substring_regex(keys, NULL_KEY_PATTERN))
        tags = Distinct.of(batch.column("tags"))
        per_topic, rows = topics.distinct.per_row, topics.distinct.rows
        # (rows refused, their record): a record per rule, or per distinct topic (an index into ``texts``).
        checks: list[tuple[np.ndarray, _Record]] = [
            (per_topic(np.array([r is not None for r in topics.name_refusals])), (topics.name_refusals, rows)),
            (pc.is_null(body).to_numpy(zero_copy_only=False), _record(BODY_NULL.error())),
            (
                matches(pc.greater(pc.binary_length(body), self.max_body)),
                _record(BODY_TOO_LARGE.error(max=self.max_body)),
            ),
            (null_keys, _record(KEYS_TYPE.error())),
            (tags.per_row(_separators(tags.values)), _record(TAGS_SEPARATORS.error())),
            (keys_separators, _record(KEYS_SEPARATORS.error())),
            ((flag < -(2**31)) | (flag >= 2**31), _record(FLAG_RANGE.error())),
            *self._property_refusals(batch),
            (per_topic(np.array([r is not None for r in topics.use_refusals])), (topics.use_refusals, rows)),
            (given & ((qid < 0) | (qid >= per_topic(topics.queues))), (topics.queue_refusals, rows)),
        ]
        texts: list[str | None] = [None]
        choices = []
        for _, record in checks:
            if isinstance(record, tuple):  # one record per distinct value of a column: (records, each row's)
                per_value, of_row = record
                choices.append(len(texts) + of_row)
                texts.extend(per_value)
            else:
                choices.append(np.full(n, len(texts)))
                texts.append(record)
        code = np.select([hit for hit, _ in checks], choices, default=0)
        if not code.any():
            return pa.nulls(n, pa.string())
        return pa.array(texts, pa.string()).take(pa.array(code))

    @staticmethod
    def _property_refusals(batch: pa.RecordBatch) -> list[tuple[np.ndarray, _Record]]:
        """``putUserProperty``'s checks and the encoding's separators, over the joined names and values."""
        joined_names, joined_values = batch.column("property_names"), batch.column("property_values")
        count = batch.column("property_count").to_numpy(zero_copy_only=False)
        names = Distinct.of(joined_names)
        distinct = names.values
        split = pc.split_pattern(distinct, PROPERTY_JOIN)
        flat = pc.list_flatten(split)
        hits = matches(pc.is_in(flat, value_set=pa.array(sorted(RESERVED_PROPERTIES))))
        parents = pc.list_parent_indices(split).to_numpy()[hits]
        reserved_names = np.zeros(len(distinct), dtype=bool)
        reserved_names[parents] = True
        # each distinct set of names' first reserved one, named in its refusal as the list path names it
        first: dict[int, str] = {}
        for parent, name in zip(parents, flat.filter(pa.array(hits)).to_pylist()):
            first.setdefault(int(parent), name)
        reserved_texts = [
            _record(RESERVED_PROPERTY.error(field=f"properties[{first[i]!r}]")) if i in first else None
            for i in range(len(distinct) + 1)  # one past the end: rows with no properties
        ]
        per_row = names.per_row  # null names (no properties) pass

        def entries(joined: pa.Array) -> np.ndarray:
            return pc.fill_null(pc.count_substring(joined, PROPERTY_JOIN), -1).to_numpy(zero_copy_only=False) + 1

        blank = per_row(matches(pc.match_substring_regex(distinct, BLANK_ENTRY_PATTERN))) | matches(
            pc.match_substring_regex(joined_values, BLANK_ENTRY_PATTERN)
        )
        # A NAME_VALUE_SEPARATOR inside a name or value makes more entries than the map has.
        separators = (
            (((per_row(entries(distinct)) != count) | (entries(joined_values) != count)) & (count > 0))
            | per_row(matches(pc.match_substring(distinct, PROPERTY_SEPARATOR)))
            | matches(pc.match_substring(joined_values, PROPERTY_SEPARATOR))
        )
        return [
            (per_row(reserved_names), (reserved_texts, names.rows)),
            (blank, _record(BLANK_PROPERTY.error())),
            (separators, _record(PROPERTY_SEPARATORS.error())),
        ]

    def complete(
        self, batch: pa.RecordBatch, partition: int, first_row: int, topics: "BatchTopics | None" = None
    ) -> dict[str, pa.Array]:
        """The batch's columns plus the defaults, the chosen queue ids, ``uniq_key``, ``properties``
        (the user's, then TAGS, KEYS and UNIQ_KEY where present) and ``size``. Rows must have
        passed :meth:`refusals`.

        The map is built by appending the system entries to the joined strings and splitting once,
        which costs a third of splitting and then inserting entries into a map.
        """
        n = batch.num_rows
        cols = {name: batch.column(name) for name in batch.schema.names}
        for name in ("queue_id", "flag"):  # 64-bit integers, in range once refusals passed
            if name in cols:
                cols[name] = cols[name].cast(pa.int32())
        for name, value in self.defaults.items():
            if name not in cols:
                cols[name] = pa.repeat(pa.scalar(value, COMMITLOG.arrow.field(name).type), n)
        topics = topics or self.topics_of(batch)
        # Round-robin over the topic's write queues, as MQFaultStrategy turns without latency faults.
        turn = (first_row + np.arange(n, dtype=np.int64) + partition * 7 + self.queue_salt) % topics.distinct.per_row(
            topics.queues
        )
        turn = pa.array(turn, pa.int32())
        cols["queue_id"] = pc.coalesce(cols["queue_id"], turn) if "queue_id" in cols else turn
        cols["uniq_key"] = self.uniq.for_rows(partition, first_row, n)
        system = [
            (MessageConst.TAGS, cols["tags"]),
            (MessageConst.KEYS, cols["keys"]),
            (MessageConst.UNIQ_KEY, cols["uniq_key"]),
        ]
        absent = pa.scalar(None, pa.string())
        names = pc.binary_join_element_wise(
            cols["property_names"],
            *[pc.if_else(pc.is_valid(v), pa.scalar(name), absent) for name, v in system],
            PROPERTY_JOIN,
            null_handling="skip",
        )
        values = pc.binary_join_element_wise(
            cols["property_values"], *[v for _, v in system], PROPERTY_JOIN, null_handling="skip"
        )
        # Joined by 1-byte separators, the k entries' names and values are 2k - 2 bytes shorter
        # than RocketMQ's properties string, where each entry ends name\x01value\x02.
        properties_length = utf8_lengths(names) + utf8_lengths(values) + 2
        names, values = pc.split_pattern(names, PROPERTY_JOIN), pc.split_pattern(values, PROPERTY_JOIN)
        if not names.offsets.equals(values.offsets):
            raise StoreError(None, "property names and values fell out of step; the rows were not checked")
        cols["properties"] = pa.MapArray.from_arrays(names.offsets, pc.list_flatten(names), pc.list_flatten(values))
        # The hosts' address families set their sysflag bits, and with them 12 bytes of size each.
        born_v6: bool | np.ndarray = bool(cast(int, self.defaults["sysflag"]) & SysFlag.BORNHOST_V6)
        if "born_host" in batch.schema.names:  # given hosts: an IPv6 ip:port has more than one colon
            born_v6 = matches(pc.greater(pc.count_substring(cols["born_host"], ":"), 1))
        sysflag = (cols["sysflag"].to_numpy() & ~SysFlag.BORNHOST_V6) | np.where(born_v6, SysFlag.BORNHOST_V6, 0)
        cols["sysflag"] = pa.array(sysflag | (SysFlag.STOREHOSTADDRESS_V6 if self.store_v6 else 0), pa.int32())
        cols["size"] = pa.array(
            message_lengths(
                utf8_lengths(cols["body"]), utf8_lengths(cols["topic"]), properties_length, born_v6, self.store_v6
            ),
            pa.int32(),
        )
        return cols


#: How a null element of an array of keys crosses from Spark: a separator, which no key may hold,
#: standing alone between key separators. Both are refused; a key that is exactly "\u0002" is
#: reported as a null key.
NULL_KEY = PROPERTY_SEPARATOR
NULL_KEY_PATTERN = r"(?:^| )\x02(?: |$)"


def _separators(strings: pa.Array) -> np.ndarray:
    """Rows holding a separator of RocketMQ's properties string (\\u0001 or \\u0002); null rows don't."""
    return matches(pc.match_substring(strings, NAME_VALUE_SEPARATOR)) | matches(
        pc.match_substring(strings, PROPERTY_SEPARATOR)
    )
