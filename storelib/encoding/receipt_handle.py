"""Receipt handles (RocketMQ's ``ReceiptHandle``): what a received message carries so its ack finds its claim.

Nine fields joined by one space: ``startOffset retrieveTime invisibleTime reviveQueueId topicType
brokerName queueId offset commitLogOffset`` (the last one the proxy's, optional when read).

>>> h = ReceiptHandle.decode("12 1700000000000 30000 0 0 broker-a 3 157 98765")
>>> h.queue_id, h.offset, h.next_visible_time, h.encode() == "12 1700000000000 30000 0 0 broker-a 3 157 98765"
(3, 157, 1700000030000, True)
>>> ReceiptHandle.decode("12 x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
storelib.model.errors.ReceiptHandleError: receipt_handle: is not a receipt handle: 2 fields, 8 or 9 expected ...
"""

from __future__ import annotations

from dataclasses import dataclass

from storelib.model.errors import ReceiptHandleError

__all__ = ["ReceiptHandle", "NORMAL_TOPIC"]

#: ``topicType`` of a message received from its own topic (RocketMQ: "1" and "2" for its retry topics).
NORMAL_TOPIC = "0"


@dataclass(frozen=True)
class ReceiptHandle:
    """One receipt handle's fields, as RocketMQ names them."""

    start_offset: int
    retrieve_time: int
    invisible_time: int
    revive_queue_id: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int = -1

    @property
    def next_visible_time(self) -> int:
        """Epoch ms when the message is received again unless acked."""
        return self.retrieve_time + self.invisible_time

    def is_expired(self, now_ms: int) -> bool:
        """RocketMQ's ``isExpired``: the handle's invisible time is over (an ack or change comes too late).

        >>> ReceiptHandle(0, 1000, 500, 0, "0", "b", 0, 0).is_expired(1500)
        True
        """
        return self.next_visible_time <= now_ms

    def encode(self) -> str:
        return " ".join(
            str(v)
            for v in (
                self.start_offset,
                self.retrieve_time,
                self.invisible_time,
                self.revive_queue_id,
                self.topic_type,
                self.broker_name,
                self.queue_id,
                self.offset,
                self.commit_log_offset,
            )
        )

    @classmethod
    def decode(cls, text: str) -> "ReceiptHandle":
        """Read a handle; :class:`~storelib.model.errors.ReceiptHandleError` when it is not one."""
        parts = text.split(" ") if isinstance(text, str) else []
        if len(parts) not in (8, 9):
            raise ReceiptHandleError(
                "receipt_handle", f"is not a receipt handle: {len(parts)} fields, 8 or 9 expected", value=text
            )
        try:
            numbers = [int(parts[i]) for i in (0, 1, 2, 3, 6, 7)] + [int(parts[8]) if len(parts) == 9 else -1]
        except ValueError:
            raise ReceiptHandleError(
                "receipt_handle", "is not a receipt handle: a number field is not a number", value=text
            ) from None
        start, retrieve, invisible, revive, queue_id, offset, clo = numbers
        return cls(start, retrieve, invisible, revive, parts[4], parts[5], queue_id, offset, clo)
