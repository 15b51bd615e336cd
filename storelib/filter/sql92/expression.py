"""A parsed SQL92 subscription (:class:`Sql92Expression`) and the entry points that make one.

:func:`parse_sql92` applies the length and nesting limits, parses (:mod:`~storelib.filter.sql92.parser`)
and caches; the expression evaluates in Python, compiles to a Spark Column and shows itself as
canonical SQL92 text or as Spark SQL (through the sqlglot dialect, display only).

>>> e = parse_sql92("TAGS IN ('TagA') AND a > 5")
>>> str(e), e.spark_sql
("TAGS IN ('TagA') AND a > 5", "TAGS IN ('TagA') AND a > 5")
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Mapping

from sqlglot import exp

from storelib.filter.sql92.dialect import RocketMQSQL92, spark_sql, to_sqlglot
from storelib.filter.sql92.java import evaluate
from storelib.filter.sql92.parser import MAX_EXPRESSION_LENGTH, MAX_NESTING, Sql92Parser
from storelib.filter.sql92.tree import Node, canonical, property_names
from storelib.model.errors import FilterExpressionError

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["Sql92Expression", "parse_sql92", "compile_sql92"]


@dataclass(frozen=True)
class Sql92Expression:
    """A parsed, validated SQL92 subscription expression.

    ``text`` is what the subscriber sent, ``tree`` the typed tree (a sqlglot expression whose nodes carry
    their Java types: :mod:`~storelib.filter.sql92.tree`), ``properties`` the property names it reads;
    ``str()`` is a canonical text that parses back to the same tree.

    >>> e = parse_sql92("a BETWEEN 1 AND 9 AND TAGS IS NOT NULL")
    >>> sorted(e.properties), e.evaluate({"a": "5", "TAGS": "x"}), e.evaluate({"a": "5"}), type(e.tree).__name__
    (['TAGS', 'a'], True, False, 'And')
    >>> df = spark.createDataFrame([({"a": "5", "TAGS": "x"},)], "properties map<string,string>")
    >>> df.where(e.to_column()).count()
    1
    """

    text: str = field(compare=False)
    tree: Node

    @property
    def properties(self) -> frozenset[str]:
        """Names of the message properties the expression reads (``TAGS`` included).

        >>> sorted(parse_sql92("a = b OR TAGS IS NULL").properties)
        ['TAGS', 'a', 'b']
        """
        return property_names(self.tree)

    @property
    def sqlglot(self) -> exp.Expr:
        """The dialect's own reading of the canonical text, with the ``Paren`` nodes sqlglot's generators
        need (``tree`` keeps none but for ``NOT (predicate)``); ValueError for a tree deeper than
        :data:`~storelib.filter.sql92.dialect.DISPLAY_MAX_DEPTH`.

        >>> type(parse_sql92("a NOT IN ('x') OR b").sqlglot).__name__
        'Or'
        """
        return to_sqlglot(self.tree)

    @classmethod
    def from_sqlglot(cls, expression: exp.Expr, **limits: int) -> Sql92Expression:
        """The expression a sqlglot expression stands for, checked as a subscription is (the
        :class:`RocketMQSQL92` generator writes text RocketMQ's grammar reads as that expression;
        ``limits`` are :func:`parse_sql92`'s).

        >>> from sqlglot import exp
        >>> e = Sql92Expression.from_sqlglot(exp.Not(this=exp.column("a").eq(1)))
        >>> str(e), e.evaluate({"a": "2"})
        ('NOT (a = 1)', True)
        """
        return parse_sql92(expression.sql(dialect=RocketMQSQL92), **limits)

    @property
    def spark_sql(self) -> str | None:
        """The expression as Spark SQL, ``sqlglot.transpile`` from the dialect (display only: Columns are
        built from the tree);
        None for a tree deeper than :data:`~storelib.filter.sql92.dialect.DISPLAY_MAX_DEPTH`.

        >>> parse_sql92("NOT a CONTAINS 'x' AND b IS NOT NULL").spark_sql
        "CONTAINS((NOT a), 'x') AND NOT b IS NULL"
        """
        return spark_sql(self.tree)

    def evaluate(self, properties: Mapping[str, str]) -> bool:
        """True where RocketMQ's evaluator returns Boolean TRUE for these properties.

        >>> parse_sql92("a > 5").evaluate({"a": "7"})
        True
        """
        return evaluate(self.tree, properties)

    def to_column(self, properties: Column | str = "properties") -> Column:
        """Boolean Column (never NULL) over a ``map<string,string>`` column of properties.

        >>> df = spark.createDataFrame([({"a": "7"},)], "props map<string,string>")
        >>> df.where(parse_sql92("a > 5").to_column("props")).count()
        1
        """
        from storelib.filter.sql92.spark import to_column  # Spark, imported where a Column is built

        return to_column(self.tree, properties)

    def __str__(self) -> str:
        return canonical(self.tree)

    def __repr__(self) -> str:
        return f"Sql92Expression({canonical(self.tree)!r})"


def parse_sql92(
    text: str, *, max_length: int = MAX_EXPRESSION_LENGTH, max_nesting: int = MAX_NESTING
) -> Sql92Expression:
    """Parse and validate a SQL92 subscription expression; :class:`FilterExpressionError` if invalid.

    A text longer than ``max_length`` characters is refused before it is read (at offset
    ``max_length``); deeper nesting than ``max_nesting`` where it goes too deep. A store passes its
    ``max_filter_expression_length`` and ``max_filter_expression_nesting`` settings.

    >>> e = parse_sql92("TAGS = 'TagA' AND price > 100")
    >>> sorted(e.properties), e.evaluate({"TAGS": "TagA", "price": "250"})
    (['TAGS', 'price'], True)
    >>> parse_sql92("a = 'x' OR b = 'y'", max_length=10)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterExpressionError: expression: expression longer than 10 characters
        (max_filter_expression_length) (got "a = 'x' OR b = 'y'") [at line 1, column 11]
    >>> parse_sql92("NOT NOT NOT a", max_nesting=3).text  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterExpressionError: expression: expression nested more than 3 deep
        (max_filter_expression_nesting) (got 'NOT NOT NOT a') [at line 1, column 13]
    """
    if not isinstance(text, str):
        raise FilterExpressionError(f"expression must be a string, not {type(text).__name__}", repr(text), 0)
    if len(text) > max_length:
        raise FilterExpressionError(
            f"expression longer than {max_length} characters (max_filter_expression_length)", text, max_length
        )
    return _parse(text, max_nesting)


@lru_cache(maxsize=256)
def _parse(text: str, max_nesting: int) -> Sql92Expression:
    # A long text becomes hundreds of thousands of small objects (sqlglot nodes, their args and meta),
    # none garbage while the parse runs: the cyclic collector's passes over them would make a parse of
    # 240K characters half again as slow per character as one of 30K. It is paused for the parse only.
    collecting = gc.isenabled()
    gc.disable()
    try:
        tree = Sql92Parser().parse_text(text, max_nesting)
    except FilterExpressionError:
        raise
    except RecursionError:
        raise FilterExpressionError("expression nested too deeply", text, 0) from None
    except Exception as e:  # never let a Python error escape as anything else
        raise FilterExpressionError(f"invalid expression ({type(e).__name__}: {e})", text, 0) from None
    finally:
        if collecting:
            gc.enable()
    return Sql92Expression(text, tree)


def compile_sql92(
    text: str,
    properties: Column | str = "properties",
    *,
    max_length: int = MAX_EXPRESSION_LENGTH,
    max_nesting: int = MAX_NESTING,
) -> Column:
    """Parse ``text`` and compile it to a boolean Column over a ``map<string,string>`` properties column
    (the limits are :func:`parse_sql92`'s).

    >>> df = spark.createDataFrame([({"a": "7"},), ({"TAGS": "TagA"},), ({"a": "1"},)], "properties map<string,string>")
    >>> df.where(compile_sql92("a > 5 OR TAGS IN ('TagA')")).count()
    2
    """
    return parse_sql92(text, max_length=max_length, max_nesting=max_nesting).to_column(properties)
