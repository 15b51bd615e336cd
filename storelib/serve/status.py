"""The ``Status`` every response carries: OK, or the code and text RocketMQ 5's proxy answers a failure with.

A failure is a response with only its status set (never a gRPC error), as the proxy's ``ResponseBuilder``
makes it; :func:`status_of` maps the store's typed errors onto the proxy's codes.

>>> missing = status_of(TopicNotFoundError("topic", "no such topic"))
>>> ok().message, status("MESSAGE_NOT_FOUND", "no new message").message, Code.Name(missing.code)
('OK', 'no new message', 'TOPIC_NOT_FOUND')
>>> s = status_of(RequestError("tag", "tag cannot contain '|'", code="ILLEGAL_MESSAGE_TAG"))
>>> Code.Name(s.code), s.message
('ILLEGAL_MESSAGE_TAG', "tag cannot contain '|'")
"""

from __future__ import annotations

import logging

from rocketmq.grpc_protocol.definition_pb2 import Code, Status

from storelib.model.errors import (
    BodyTooLargeError,
    ConcurrentWriteError,
    ConsumeDisabledError,
    FilterError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageError,
    ReceiptHandleError,
    RequestError,
    StoreError,
    StorePermissionError,
    SubscriptionGroupNotFoundError,
    TimerMessageError,
    TopicNotFoundError,
    TopicPermissionError,
    TransactionNotFoundError,
)

__all__ = ["Code", "ok", "status", "status_of"]

log = logging.getLogger("storelib.serve")

#: The proxy's code for each of the store's errors, most specific first.
_CODES: tuple[tuple[type[StoreError], str], ...] = (
    (ReceiptHandleError, "INVALID_RECEIPT_HANDLE"),
    (TopicNotFoundError, "TOPIC_NOT_FOUND"),
    (SubscriptionGroupNotFoundError, "CONSUMER_GROUP_NOT_FOUND"),
    (InvalidTopicError, "ILLEGAL_TOPIC"),
    (BodyTooLargeError, "MESSAGE_BODY_TOO_LARGE"),
    (InvalidPropertyError, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    (TimerMessageError, "ILLEGAL_DELIVERY_TIME"),
    (FilterError, "ILLEGAL_FILTER_EXPRESSION"),
    (TransactionNotFoundError, "INVALID_TRANSACTION_ID"),
    (TopicPermissionError, "FORBIDDEN"),
    (StorePermissionError, "FORBIDDEN"),
    (ConsumeDisabledError, "FORBIDDEN"),
    (ConcurrentWriteError, "TOO_MANY_REQUESTS"),
    (MessageError, "BAD_REQUEST"),
)


def ok() -> Status:
    return Status(code=Code.OK, message="OK")


def status(code: str, message: str | None = None) -> Status:
    """A status of the code named ``code`` (its name as the message unless given)."""
    return Status(code=Code.Value(code), message=code if message is None else message)


def status_of(error: BaseException) -> Status:
    """The status the proxy answers ``error`` with: a :class:`RequestError`'s own code and text, the code
    mapped from the store's error class, else INTERNAL_SERVER_ERROR (logged: a fault of ours)."""
    if isinstance(error, RequestError):
        return status(error.code or "BAD_REQUEST", error.reason)
    if isinstance(error, StoreError):
        for kind, code in _CODES:
            if isinstance(error, kind):
                return status(code, str(error))
        return status("INTERNAL_SERVER_ERROR", str(error))
    log.error("request failed: %s: %s", type(error).__name__, error, exc_info=error)
    return status("INTERNAL_SERVER_ERROR", f"{type(error).__name__}: {error}")
