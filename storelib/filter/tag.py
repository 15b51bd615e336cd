"""Tag subscriptions: RocketMQ's ``FilterAPI``, ``SubscriptionData`` and its two-stage tag match.

Details: ``docs/internals.md``, section storelib.filter.tag.

>>> sub = build_subscription("TopicTest", "TagA || TagB")
>>> sorted(sub.tags_set), sub.matches_tag("TagB"), sub.matches_tag("TagC")
(['TagA', 'TagB'], True, False)
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from storelib.encoding.hashcode import java_string_hash
from storelib.encoding.tags import tags_code as _tags_code
from storelib.model.errors import FilterError, FilterExpressionError
from storelib.model.timestamps import now_ms
from storelib.model.validation import lone_surrogate

if TYPE_CHECKING:  # Spark, imported where a Column is built: the commands and the endpoint never start it
    from pyspark.sql import Column

__all__ = [
    "ExpressionType",
    "SUB_ALL",
    "TAG_SEPARATOR",
    "SubscriptionData",
    "build_subscription",
    "build_subscription_data",
    "code_match_column",
    "tag_match_column",
]

#: The tag expression that subscribes to every message (``SubscriptionData.SUB_ALL``).
SUB_ALL = "*"
#: What separates tags in a tag expression.
TAG_SEPARATOR = "||"

_INT_MIN, _INT_MAX, _MASK32 = -(1 << 31), (1 << 31) - 1, 0xFFFFFFFF
#: Characters Java's ``String.trim`` removes: every char up to and including U+0020.
_JAVA_TRIM = "".join(chr(i) for i in range(0x21))


class ExpressionType:
    """Names of subscription expression languages (``org.apache.rocketmq.common.filter.ExpressionType``).

    >>> ExpressionType.is_tag_type(None), ExpressionType.is_tag_type("TAG"), ExpressionType.is_tag_type("tag")
    (True, True, False)
    """

    TAG = "TAG"
    SQL92 = "SQL92"
    #: A class filter (storelib's name: RocketMQ marks these with ``SubscriptionData.classFilterMode``);
    #: its expression is the tag expression that prunes before the class runs.
    CLASS = "CLASS"

    @staticmethod
    def is_tag_type(expression_type: str | None) -> bool:
        """True for ``None``, ``""`` and exactly ``"TAG"`` (case-sensitive: ``"tag"`` is not a tag type)."""
        return expression_type is None or expression_type == "" or expression_type == ExpressionType.TAG


@dataclass(frozen=True, eq=True)
class SubscriptionData:
    """One consumer's subscription to one topic (RocketMQ's ``SubscriptionData``).

    ``tags_set`` and ``code_set`` are frozen sets; ``sub_version`` (epoch ms, set when built) takes
    no part in equality or hashing, so two builds of the same expression are equal (RocketMQ's
    ``equals`` compares it, its ``hashCode`` does not).

    >>> SubscriptionData("T", "TagA", tags_set={"TagA"}, code_set={2598919}).matches_code(2598919)
    True
    """

    topic: str
    sub_string: str
    expression_type: str = ExpressionType.TAG
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = field(default_factory=now_ms, compare=False)
    class_filter_mode: bool = False

    def __post_init__(self) -> None:
        for name in ("topic", "sub_string", "expression_type"):
            if not isinstance(getattr(self, name), str):
                raise FilterError(name, "must be a string", value=getattr(self, name))
        tags = frozenset(_iterable(self.tags_set, "tags_set"))
        if not all(isinstance(t, str) for t in tags):
            raise FilterError("tags_set", "must hold strings only", value=self.tags_set)
        codes = frozenset(_iterable(self.code_set, "code_set"))
        if not all(_is_int(c) and _INT_MIN <= c <= _INT_MAX for c in codes):
            raise FilterError("code_set", "must hold 32-bit ints only", value=self.code_set)
        if not _is_int(self.sub_version):
            raise FilterError("sub_version", "must be an int (epoch milliseconds)", value=self.sub_version)
        if not isinstance(self.class_filter_mode, bool):
            raise FilterError("class_filter_mode", "must be a bool", value=self.class_filter_mode)
        object.__setattr__(self, "tags_set", tags)
        object.__setattr__(self, "code_set", codes)

    def __repr__(self) -> str:
        return (
            f"SubscriptionData(topic={self.topic!r}, sub_string={self.sub_string!r}, "
            f"expression_type={self.expression_type!r}, tags_set={sorted(self.tags_set)!r}, "
            f"code_set={sorted(self.code_set)!r}, sub_version={self.sub_version}, "
            f"class_filter_mode={self.class_filter_mode})"
        )

    @property
    def is_sub_all(self) -> bool:
        """Whether the expression is exactly ``"*"`` (``" * "`` is a tag named ``*``, not a wildcard)."""
        return self.sub_string == SUB_ALL

    def matches_code(self, tags_code: int | None) -> bool:
        """The broker's consume-queue stage for one ``tagsCode`` (``None``: no valid code, passes).

        Not a tag type or class filter mode: passes (other stages decide). ``"*"``: passes. Else
        the code's low 32 bits (Java ``Long.intValue``) must be in ``code_set``: an expression that
        gave no tags (``"  "``) passes nothing.

        >>> build_subscription("T", "Aa").matches_code(2112), build_subscription("T", "Aa").matches_code(1)
        (True, False)
        """
        if tags_code is not None and not _is_int(tags_code):
            raise FilterError("tags_code", "must be an int or None", value=tags_code)
        if (
            self.class_filter_mode
            or not ExpressionType.is_tag_type(self.expression_type)
            or tags_code is None
            or self.is_sub_all
        ):
            return True
        low = tags_code & _MASK32
        return (low - (1 << 32) if low > _INT_MAX else low) in self.code_set

    def matches_tag(self, tags: str | None) -> bool:
        """The client's stage for one message's TAGS string: passes when ``tags_set`` is empty
        (``"*"``) or in class filter mode; otherwise ``tags`` must be one of ``tags_set``.

        >>> build_subscription("T", "Aa").matches_tag("BB"), build_subscription("T", "*").matches_tag(None)
        (False, True)
        """
        if tags is not None and not isinstance(tags, str):
            raise FilterError("tags", "must be a string or None", value=tags)
        if self.class_filter_mode or not self.tags_set:
            return True
        return tags is not None and tags in self.tags_set

    def matches(self, tags: str | None) -> bool:
        """Both stages for a message with TAGS ``tags`` (its code being ``tags_code(tags)``,
        :mod:`storelib.encoding.tags`).

        >>> build_subscription("T", "Aa").matches("BB"), build_subscription("T", "Aa").matches("Aa")
        (False, True)
        """
        return self.matches_code(_tags_code(tags)) and self.matches_tag(tags)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _iterable(value: object, name: str) -> Iterable:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise FilterError(name, "must be a set", value=value)
    return value


def _java_is_whitespace(ch: str) -> bool:
    """Java ``Character.isWhitespace``: Unicode space separators except the no-break ones, plus
    ``\\t \\n \\x0b \\f \\r`` and ``\\x1c``-``\\x1f``."""
    cp = ord(ch)
    if cp in (0x00A0, 0x2007, 0x202F):
        return False
    return 0x09 <= cp <= 0x0D or 0x1C <= cp <= 0x1F or unicodedata.category(ch) in ("Zs", "Zl", "Zp")


def _is_blank(text: str | None) -> bool:
    """Commons-lang ``StringUtils.isBlank``: ``None``, empty, or Java whitespace only."""
    return text is None or all(_java_is_whitespace(ch) for ch in text)


def _check_args(topic: object, sub_string: object, expression_type: object) -> None:
    if not isinstance(topic, str):
        raise FilterError("topic", "must be a string", value=topic)
    if sub_string is not None and not isinstance(sub_string, str):
        raise FilterError("sub_string", "must be a string or None", value=sub_string)
    if expression_type is not None and not isinstance(expression_type, str):
        raise FilterError("expression_type", "must be a string or None", value=expression_type)


def _parse_tags(sub_string: str) -> tuple[frozenset[str], frozenset[int]]:
    """Tags of ``a || b``: split on ``||`` (trailing empty pieces dropped, as Java's regex split
    does), each piece trimmed the Java way, empty ones skipped; nothing at all left is an error."""
    surrogate = lone_surrogate(sub_string)
    if surrogate is not None:  # no UTF-8 bytes, so no tag could carry it: refused where it stands
        raise FilterExpressionError("a lone surrogate is not valid Unicode text", sub_string, surrogate)
    pieces = sub_string.split(TAG_SEPARATOR)
    while pieces and pieces[-1] == "":
        pieces.pop()
    if not pieces:
        raise FilterExpressionError("subString split error: no tag between the '||' separators", sub_string, 0)
    tags = frozenset(t for t in (p.strip(_JAVA_TRIM) for p in pieces) if t)
    return tags, frozenset(java_string_hash(t) for t in tags)


def _tag_subscription(topic: str, sub_string: str | None) -> SubscriptionData:
    """``FilterAPI.buildSubscriptionData(topic, subString)``: always a TAG subscription."""
    if not sub_string or sub_string == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL)
    tags, codes = _parse_tags(sub_string)
    return SubscriptionData(topic, sub_string, ExpressionType.TAG, tags, codes)


def build_subscription_data(topic: str, sub_string: str | None, expression_type: str | None = None) -> SubscriptionData:
    """RocketMQ's ``FilterAPI.buildSubscriptionData``: parse ``sub_string`` as tags whatever the type.

    ``None``/``""``/``"*"`` subscribe to all (``sub_string`` becomes ``"*"``). A non-blank
    ``expression_type`` is stored verbatim (``"sql92"``, ``"tag"``), yet the text is still parsed
    as tags. Only separators (``"||"``, ``"||||"``) raise :class:`FilterExpressionError`.

    >>> s = build_subscription_data("T", " TagA ||  || TagB ", "SQL92")
    >>> s.expression_type, sorted(s.tags_set)
    ('SQL92', ['TagA', 'TagB'])
    """
    _check_args(topic, sub_string, expression_type)
    sub = _tag_subscription(topic, sub_string)
    if expression_type is not None and not _is_blank(expression_type):
        sub = SubscriptionData(
            sub.topic,
            sub.sub_string,
            expression_type,
            sub.tags_set,
            sub.code_set,
            sub.sub_version,
            sub.class_filter_mode,
        )
    return sub


def build_subscription(
    topic: str, sub_string: str | None, expression_type: str | None = ExpressionType.TAG
) -> SubscriptionData:
    """RocketMQ's ``FilterAPI.build`` (what a broker does with a pull request's subscription).

    Type ``None`` or exactly ``"TAG"``: as :func:`build_subscription_data` without a type. Any
    other type (``"SQL92"``, ``"tag"``, ``""``): the text is kept verbatim with no tags; an empty
    or ``None`` text raises :class:`FilterExpressionError` (RocketMQ's IllegalArgumentException).

    >>> build_subscription("T", "a > 1", "SQL92").tags_set
    frozenset()
    """
    _check_args(topic, sub_string, expression_type)
    if expression_type is None or expression_type == ExpressionType.TAG:
        return _tag_subscription(topic, sub_string)
    if not sub_string:
        raise FilterExpressionError(f"an expression of type {expression_type!r} can't be empty", "", 0)
    return SubscriptionData(topic, sub_string, expression_type)


def code_match_column(sub: SubscriptionData, tags_code: Column) -> Column:
    """The consume-queue stage as a boolean column over an integral ``tags_code`` column.

    TRUE for a NULL code (RocketMQ passes a message whose ``tagsCode`` is unknown), for ``"*"``,
    class filter mode and non-tag types; otherwise the code's low 32 bits must be in
    ``sub.code_set``. Never NULL. The ``IN`` on the raw column lets Parquet/Delta skip files.

    >>> sub = build_subscription("T", "TagA || TagB")
    >>> df = spark.createDataFrame([(2598919,), (7,), (None,)], "tags_code long")
    >>> [r[0] for r in df.select(code_match_column(sub, F.col("tags_code"))).collect()]
    [True, False, True]
    """
    from pyspark.sql import functions as F

    if sub.class_filter_mode or not ExpressionType.is_tag_type(sub.expression_type) or sub.is_sub_all:
        return F.lit(True)
    codes = sorted(sub.code_set)
    if not codes:
        return tags_code.isNull()
    # A stored code outside the int range (e.g. a delay-level timestamp) compares by its low 32 bits.
    wide = (tags_code < F.lit(_INT_MIN)) | (tags_code > F.lit(_INT_MAX))
    wrapped = wide & tags_code.bitwiseAND(F.lit(_MASK32)).isin([c & _MASK32 for c in codes])
    return tags_code.isNull() | tags_code.isin(codes) | wrapped


def tag_match_column(sub: SubscriptionData, tags: Column) -> Column:
    """The client's stage as a boolean column over the message's TAGS string column.

    TRUE for every row when ``sub.tags_set`` is empty (``"*"``) or in class filter mode; otherwise
    TRUE exactly when ``tags`` is one of ``sub.tags_set`` (NULL tags give FALSE). Never NULL.

    >>> sub = build_subscription("T", "TagA || TagB")
    >>> df = spark.createDataFrame([("TagA",), ("TagC",), (None,)], "tags string")
    >>> [r[0] for r in df.select(tag_match_column(sub, F.col("tags"))).collect()]
    [True, False, False]
    """
    from pyspark.sql import functions as F

    if sub.class_filter_mode or not sub.tags_set:
        return F.lit(True)
    return tags.isNotNull() & tags.isin(sorted(sub.tags_set))
