"""One exception hierarchy for the whole store, rooted in :class:`StoreError`.

Every error names what was wrong (``field``) and, where RocketMQ has one, the broker's
response code name (``code``) so that a RocketMQ engineer recognises it. As pyspark's errors
do, each also subclasses the matching builtin, so ``except ValueError`` (a bad message, id,
expression or setting), ``except LookupError`` (nothing found) and ``except PermissionError``
(forbidden) work too. Errors found on Spark executors travel to the driver as records
(:meth:`StoreError.to_record`, :func:`error_from_record`), never as text to parse.

>>> issubclass(TopicNotFoundError, LookupError), issubclass(BodyTooLargeError, ValueError)
(True, True)
>>> e = error_from_record(InvalidQueueIdError("queue_id", "is too big", value=9).to_record())
>>> type(e).__name__, e.field, e.value, e.code
('InvalidQueueIdError', 'queue_id', 9, 'MESSAGE_ILLEGAL')

>>> try:
...     raise InvalidTopicError("topic", "contains illegal characters", value="a b")
... except StoreError as e:
...     print(e.code, "|", e)
MESSAGE_ILLEGAL | topic: contains illegal characters (got 'a b')
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = [
    "StoreError",
    "SessionError",
    "ReceiptHandleError",
    "RequestError",
    "StoreNotFoundError",
    "StoreCorruptedError",
    "StorageAccessError",
    "ExternalError",
    "StoreIOError",
    "translate_external",
    "translate_methods",
    "DataSourceOptionError",
    "MessageError",
    "InvalidTopicError",
    "ReservedTopicError",
    "BodyTooLargeError",
    "InvalidPropertyError",
    "ReservedPropertyError",
    "InvalidQueueIdError",
    "TopicNotFoundError",
    "TopicPermissionError",
    "MessageIdError",
    "MessageNotFoundError",
    "ConcurrentWriteError",
    "DispatchError",
    "StoreStateError",
    "ConfigError",
    "JavaNotFoundError",
    "FilterError",
    "FilterExpressionError",
    "FilterNotSupportedError",
    "FilterClassError",
    "SubscriptionNotFoundError",
    "BloomFilterError",
    "SubscriptionNotLatestError",
    "SubscriptionGroupNotFoundError",
    "ConsumeDisabledError",
    "StorePermissionError",
    "OffsetError",
    "TimerMessageError",
    "TransactionError",
    "TransactionNotFoundError",
    "TransactionEndedError",
    "ProgressMovedError",
    "require_int",
    "error_from_record",
    "MISSING",
]

#: Marks an error's ``value`` as not given (``None`` is a value a caller can get wrong).
MISSING: Any = object()


class StoreError(Exception):
    """Root of every error the store raises on purpose.

    ``field`` names the input that was wrong, ``code`` is RocketMQ's response code name
    (``None`` where RocketMQ has no such check).

    >>> e = StoreError("max_num", "must be a positive integer", value=0, where="query_by_key")
    >>> str(e), e.field, e.value
    ('max_num: must be a positive integer (got 0) [at query_by_key]', 'max_num', 0)
    """

    code: str | None = None

    def __init__(
        self, field: str | None, reason: str, *, value: Any = MISSING, where: str | None = None, code: str | None = None
    ):
        if code is not None:
            self.code = code  # the same mistake answers differently on another path (send vs pull)
        self.field = field
        self.reason = reason
        self.value = None if value is MISSING else value
        self.where = where
        text = f"{field}: {reason}" if field else reason
        if value is not MISSING:
            text += f" (got {value!r})"
        if where:
            text += f" [at {where}]"
        super().__init__(text)

    def to_record(self) -> dict[str, Any]:
        """The error as plain data (JSON-able where its value is), to send across processes."""
        record = {
            "error": type(self).__name__,
            "field": self.field,
            "reason": self.reason,
            "where": self.where,
            "code": self.code,
        }
        if self.value is not None:
            record["value"] = self.value
        return record


class MessageError(StoreError, ValueError):
    """A message that RocketMQ's broker would refuse (``MESSAGE_ILLEGAL``)."""

    code = "MESSAGE_ILLEGAL"


class InvalidTopicError(MessageError):
    """A topic name outside RocketMQ's rules: blank, too long, or not ``^[%|a-zA-Z0-9_-]+$``."""


class ReservedTopicError(InvalidTopicError):
    """A system topic that users may not create or send to (``SCHEDULE_TOPIC_XXXX``, ...)."""

    code = "NO_PERMISSION"


class BodyTooLargeError(MessageError):
    """A body over the configured maximum (4 MiB by default, ``maxMessageSize``)."""


class InvalidPropertyError(MessageError):
    """A property whose name or value is not a non-blank string."""


class ReservedPropertyError(InvalidPropertyError):
    """A user property that RocketMQ reserves for itself (``MessageConst.STRING_HASH_SET``)."""


class InvalidQueueIdError(MessageError):
    """A queue id outside ``[0, writeQueueNums)`` of the topic."""


class TopicNotFoundError(StoreError, LookupError):
    """A topic the store has no configuration for (``TOPIC_NOT_EXIST``)."""

    code = "TOPIC_NOT_EXIST"


class TopicPermissionError(StoreError, PermissionError):
    """A topic whose permission forbids the operation (``NO_PERMISSION``)."""

    code = "NO_PERMISSION"


class MessageIdError(StoreError, ValueError):
    """A message id that is malformed or names another store host."""


class MessageNotFoundError(StoreError, LookupError):
    """No stored message matches the id, key or unique key asked for (``QUERY_NOT_FOUND``)."""

    code = "QUERY_NOT_FOUND"


class ConcurrentWriteError(StoreError, RuntimeError):
    """Another writer kept winning the same Delta commit; nothing of ours was committed."""


class DispatchError(StoreError, RuntimeError):
    """The dispatch job could not make progress; the tables are unchanged past the last commit."""


class StoreStateError(StoreError, RuntimeError):
    """The store's tables disagree with what this version of storelib expects."""


class ConfigError(StoreError, ValueError):
    """A store setting that does not exist, or with a value of the wrong kind."""


class JavaNotFoundError(StoreError, RuntimeError):
    """Spark needs Java 17+; none was found."""


class SessionError(StoreError, RuntimeError):
    """A Spark session that lacks what the store needs (worker Python, Delta Spark, a setting); says which."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """No store at this path (open one that exists, or create it with ``MessageStore.create``)."""


class StorageAccessError(StoreError, ConnectionError):
    """The object store under a root cannot be used (it does not answer, refuses the credentials, or has no
    such bucket); says which root and what to check. Raised before anything is read or written."""


class StoreCorruptedError(StoreError, RuntimeError):
    """The store's tables are damaged or disagree (a Delta log lost or unreadable, a data file gone,
    a table dispatched past the commitlog's end): refused before anything reads or writes it.

    ``problems`` lists each finding; the message names the first and what inspects or repairs it.
    """

    def __init__(self, problems: "list[str]", root: str) -> None:
        self.problems = list(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(
            "root",
            f"the store at {root} is damaged: {problems[0]}{more}; nothing was "
            "changed (MessageStore.verify(path) lists every problem)",
        )


class ExternalError(StoreError, RuntimeError):
    """Spark, py4j, pyarrow or deltalake failed under a store call: their error, chained as ``__cause__``,
    under the store's hierarchy (``field`` is None; the reason names the library's error)."""


class StoreIOError(StoreError, OSError):
    """The file system failed under a store call (a missing or unreadable file, a full disk); the
    ``OSError`` is chained as ``__cause__``."""


#: Libraries whose exceptions are translated at the public API's boundary.
_EXTERNAL = ("py4j", "pyspark", "pyarrow", "deltalake", "_deltalake", "_internal")  # deltalake 1.x's: _internal


def translate_external(func: Any) -> Any:
    """Wrap ``func`` so a third-party error under it (see :data:`_EXTERNAL`) or an ``OSError`` leaves as
    :class:`ExternalError` / :class:`StoreIOError`, the original chained; every other error passes as it is.

    >>> @translate_external
    ... def read(path):
    ...     return open(path)
    >>> read("/no/such/file")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.StoreIOError: FileNotFoundError: [Errno 2] No such file or directory: '/no/such/file'
        [at read]
    """

    @functools.wraps(func)
    def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except StoreError:
            raise
        except OSError as e:
            raise StoreIOError(None, f"{type(e).__name__}: {e}", where=func.__name__) from e
        except Exception as e:
            if type(e).__module__.split(".")[0] not in _EXTERNAL:
                raise
            first = str(e).strip().splitlines()[0][:500] if str(e).strip() else ""
            raise ExternalError(None, f"{type(e).__module__}.{type(e).__name__}: {first}", where=func.__name__) from e

    return translated


def translate_methods(cls: type) -> type:
    """Apply :func:`translate_external` to every public method of ``cls`` (the public API's boundary).

    >>> @translate_methods
    ... class Handle:
    ...     def load(self):
    ...         import pyarrow as pa
    ...         return pa.array([1]).cast(pa.string()).cast(pa.int8()).cast(pa.date32())
    >>> Handle().load()  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.ExternalError: pyarrow.lib.ArrowNotImplementedError: Unsupported cast from int8 to date32
        using function cast_date32 [at load]
    """
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, (classmethod, staticmethod)):
            setattr(cls, name, type(member)(translate_external(member.__func__)))
        elif callable(member) and not isinstance(member, type):
            setattr(cls, name, translate_external(member))
    return cls


class DataSourceOptionError(StoreError, ValueError):
    """An option of the ``rocketmq`` data source that is missing, unknown or of the wrong kind."""


class FilterError(StoreError, ValueError):
    """A subscription the store cannot use (tag string, SQL92 expression, selector or group)."""


class FilterExpressionError(FilterError):
    """A subscription expression outside RocketMQ's grammar (``SUBSCRIPTION_PARSE_FAILED``).

    ``expression`` is the text, ``position`` the 0-based character offset of the first thing that
    is wrong, and ``line``/``column`` (1-based) the same place for humans.

    >>> e = FilterExpressionError("unexpected 'LIKE'", "a LIKE 'x%'", 2)
    >>> e.position, e.line, e.column
    (2, 1, 3)
    >>> print(e)
    expression: unexpected 'LIKE' (got "a LIKE 'x%'") [at line 1, column 3]

    A long expression is shown as the 60 characters around the position (``value`` keeps it whole):

    >>> print(FilterExpressionError("unexpected ')'", "a = 1 AND " * 50 + ")", 500))
    expression: unexpected ')' (got '...a = 1 AND a = 1 AND a = 1 AND )') [at line 1, column 501]
    """

    code = "SUBSCRIPTION_PARSE_FAILED"
    #: Characters of the expression a message shows on each side of the position.
    SHOWN = 30

    def __init__(self, reason: str, expression: str, position: int):
        self.expression = expression
        self.position = max(0, min(int(position), len(expression)))
        before = expression[: self.position]
        self.line = before.count("\n") + 1
        self.column = self.position - (before.rfind("\n") + 1) + 1
        lo, hi = max(0, self.position - self.SHOWN), self.position + self.SHOWN
        shown = ("..." if lo else "") + expression[lo:hi] + ("..." if hi < len(expression) else "")
        super().__init__("expression", reason, value=shown, where=f"line {self.line}, column {self.column}")
        self.value = expression


class FilterNotSupportedError(FilterError):
    """A filter type the store is configured not to serve, e.g. SQL92 with property filtering off
    (``FILTER_NOT_SUPPORT``)."""

    code = "FILTER_NOT_SUPPORT"


class FilterClassError(FilterError):
    """A class filter the store cannot load: its module does not import, the class is missing, is not a
    class, cannot be built without arguments, or has neither ``match`` nor ``match_batch``
    (``SUBSCRIPTION_PARSE_FAILED``, as a subscription the broker cannot build).

    >>> FilterClassError("filter_class", "cannot import module 'nowhere'", value="nowhere:Even").code
    'SUBSCRIPTION_PARSE_FAILED'
    """

    code = "SUBSCRIPTION_PARSE_FAILED"


class SubscriptionNotFoundError(FilterError, LookupError):
    """No subscription is registered for the (group, topic) asked for (``SUBSCRIPTION_NOT_EXIST``)."""

    code = "SUBSCRIPTION_NOT_EXIST"


class BloomFilterError(FilterError):
    """Bloom filter settings, bit positions or bitmaps that do not fit together (RocketMQ throws
    IllegalArgumentException), e.g. a bitmap whose length is not the filter's ``m`` bits."""


class SubscriptionNotLatestError(FilterError):
    """The store holds an older subscription than the consumer pulls with (``SUBSCRIPTION_NOT_LATEST``)."""

    code = "SUBSCRIPTION_NOT_LATEST"


class SubscriptionGroupNotFoundError(StoreError, LookupError):
    """A consumer group with no configuration, where groups are not created on first use
    (``SUBSCRIPTION_GROUP_NOT_EXIST``)."""

    code = "SUBSCRIPTION_GROUP_NOT_EXIST"


class ConsumeDisabledError(StoreError, PermissionError):
    """A consumer group whose configuration forbids consuming (``consumeEnable=false``: ``NO_PERMISSION``)."""

    code = "NO_PERMISSION"


class StorePermissionError(StoreError, PermissionError):
    """The store as a whole is not readable or not writable (``brokerPermission``: ``NO_PERMISSION``)."""

    code = "NO_PERMISSION"


def require_int(
    error: type[StoreError],
    field: str,
    value: object,
    lo: int | None = None,
    hi: int | None = None,
    *,
    optional: bool = False,
) -> None:
    """Raise ``error`` naming ``field`` unless ``value`` is an int (not a bool) within ``[lo, hi]``
    (or None, when ``optional``).

    >>> require_int(OffsetError, "offset", -1, 0)
    Traceback (most recent call last):
    ...
    storelib.model.errors.OffsetError: offset: must be an integer >= 0 (got -1)
    """
    if optional and value is None:
        return
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or (lo is not None and value < lo)
        or (hi is not None and value > hi)
    ):
        bounds = "" if lo is None else f" in {lo}..{hi}" if hi is not None else f" >= {lo}"
        raise error(field, f"must be an integer{bounds}" + (" or None" if optional else ""), value=value)


class OffsetError(StoreError, ValueError):
    """A queue offset that is not a non-negative integer, or a consumer offset that cannot be stored."""


class TimerMessageError(MessageError):
    """A timer message the store refuses: a deliver time that is no number, or further away than
    ``timer_max_delay_ms`` (``WHEEL_TIMER_MSG_ILLEGAL``); a recall of a message already delivered."""

    code = "WHEEL_TIMER_MSG_ILLEGAL"


class TransactionError(StoreError, ValueError):
    """A transaction request the store refuses (a bad state, producer group or checker)."""


class TransactionNotFoundError(TransactionError, LookupError):
    """No half message is pending under the transaction id asked for."""


class TransactionEndedError(TransactionError):
    """The transaction was already committed or rolled back; nothing was written."""


class ProgressMovedError(ConcurrentWriteError):
    """Progress a write was planned from (delivery, transaction checks) moved before it committed:
    another run got there first. Nothing of ours was committed; plan again."""


class ReceiptHandleError(StoreError, ValueError):
    """A receipt handle that is not one, or names no live claim any more (acked, expired, renewed)."""

    code = "INVALID_RECEIPT_HANDLE"


class RequestError(StoreError, ValueError):
    """A request the gRPC endpoint refuses with RocketMQ 5's proxy checks; ``code`` is the
    ``apache.rocketmq.v2.Code`` name it answers with (ILLEGAL_TOPIC, ILLEGAL_MESSAGE_GROUP, ...).

    >>> RequestError("message_group", "message group exceed the max size 64", code="ILLEGAL_MESSAGE_GROUP").code
    'ILLEGAL_MESSAGE_GROUP'
    """

    code = "BAD_REQUEST"


def error_from_record(record: dict[str, Any], where: str | None = None) -> StoreError:
    """The error a :meth:`StoreError.to_record` record describes (a :class:`StoreError` where the class
    is not one of the store's), with ``where`` in place of the record's own when given."""
    kinds = {name: obj for name, obj in globals().items() if isinstance(obj, type) and issubclass(obj, StoreError)}
    kind = kinds.get(record.get("error", ""), StoreError)
    extra = {"value": record["value"]} if "value" in record else {}
    try:
        error = kind(record.get("field"), record.get("reason", ""), where=where or record.get("where"), **extra)
    except TypeError:  # an error class built from other arguments (FilterExpressionError)
        error = StoreError(record.get("field"), record.get("reason", ""), where=where or record.get("where"), **extra)
    if record.get("code") and record["code"] != error.code:
        error.code = record["code"]
    return error
