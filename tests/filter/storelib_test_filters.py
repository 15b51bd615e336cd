"""Filter classes for tests/filter/test_class_filter.py: a real module, shipped to the executors with
``SparkContext.addPyFile`` (see the ``filters`` fixture there)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc


class EvenSequence:
    """The seed's filter: SequenceId % 10 == 0 and > 100."""

    def match(self, msg, context) -> bool:
        seq = msg.properties.get("SequenceId")
        return seq is not None and int(seq) % 10 == 0 and int(seq) > 100


class EvenSequenceBatch:
    """The same predicate over a whole Arrow batch."""

    def match_batch(self, batch: pa.RecordBatch, context) -> pa.BooleanArray:
        seq = pc.cast(pc.map_lookup(batch.column("properties"), pa.scalar("SequenceId"), "first"), pa.int64())
        return pc.fill_null(pc.and_(pc.equal(pc.remainder(seq, 10), 0), pc.greater(seq, 100)), False)


class FailsOnTagC(EvenSequence):
    """EvenSequence, but raises on TagC messages: a tag prefilter must keep them away."""

    def match(self, msg, context) -> bool:
        if msg.tags == "TagC":
            raise RuntimeError("saw a TagC message")
        return super().match(msg, context)


class Flaky:
    """Raises where SequenceId is not a number, returns a non-bool where it ends in 7, else EvenSequence."""

    def match(self, msg, context):
        seq = int(msg.properties["SequenceId"])  # ValueError on 'bad'
        if seq % 10 == 7:
            return "yes"
        return seq % 10 == 0 and seq > 100


class BatchRaises:
    def match_batch(self, batch, context):
        raise ZeroDivisionError("no batches today")


class BatchWrongLength:
    def match_batch(self, batch, context):
        return pa.array([True], pa.bool_())


class BatchNulls:
    """True where SequenceId % 10 == 0, null where it is not a number."""

    def match_batch(self, batch, context):
        seq = _to_int(batch)
        return pc.equal(pc.remainder(seq, 10), 0)


def _to_int(batch):
    values = pc.map_lookup(batch.column("properties"), pa.scalar("SequenceId"), "first").to_pylist()
    return pa.array([int(v) if v is not None and v.isdigit() else None for v in values], pa.int64())


class Inspects:
    """Keeps a message only if every attribute a filter is promised has the right type and agrees with
    the context: what ``msg`` and ``context`` carry, on the executors and in pulls."""

    def match(self, msg, context) -> bool:
        checks = [
            context.consumer_group == "GroupI",
            context.topic == "TopicTest",
            msg.topic == context.topic,
            isinstance(msg.msg_id, str) and len(msg.msg_id) == 32,
            msg.tags in ("TagA", "TagB", "TagC"),
            msg.keys == "k" + msg.properties["SequenceId"],
            isinstance(msg.body, bytes),
            msg.body == b"m" + msg.properties["SequenceId"].encode(),
            isinstance(msg.queue_id, int),
            isinstance(msg.queue_offset, int),
            isinstance(msg.commitlog_offset, int),
            isinstance(msg.store_timestamp, dt.datetime),
            isinstance(msg.born_timestamp, dt.datetime),
            "SequenceId" in msg.properties,
            msg.properties.get("TAGS") == msg.tags,
            dict(msg.properties)["SequenceId"] == msg.properties["SequenceId"],
            msg.properties.get(7) is None,
        ]
        return all(checks)


class NoMatchMethod:
    def accept(self, msg, context):
        return True


class NeedsArguments:
    def __init__(self, threshold):
        self.threshold = threshold

    def match(self, msg, context):
        return True


NOT_A_CLASS = 42
