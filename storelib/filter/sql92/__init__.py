"""RocketMQ's SQL92 message selector: grammar, typed tree, Java semantics and its compilations.

``parser`` reads a text into the typed tree of ``tree``: sqlglot expressions whose nodes carry their
Java types (``lexer`` supplies the tokens). ``java`` evaluates the tree as RocketMQ's Java code does,
``states`` derives the tables the compilations share, ``spark`` and ``arrow`` compile it to a Spark
Column and to vectorized Arrow evaluation, ``dialect`` is the language as a sqlglot dialect (Spark SQL
for display) and ``expression`` ties them together.

>>> from storelib.filter.sql92 import parse_sql92
>>> e = parse_sql92("a between 1 and 5 and TAGS in ('TagA','TagB')")
>>> str(e), type(e.tree).__name__, parse_sql92(str(e)) == e
("a BETWEEN 1 AND 5 AND TAGS IN ('TagA', 'TagB')", 'And', True)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storelib.filter.sql92.dialect import RocketMQSQL92
    from storelib.filter.sql92.expression import Sql92Expression, compile_sql92, parse_sql92
    from storelib.filter.sql92.parser import MAX_EXPRESSION_LENGTH, MAX_NESTING, Sql92Parser
    from storelib.filter.sql92.tree import JavaType, Node, java_type

#: Each name's module, imported at the name's first use (PEP 562): importing one module of the package, as
#: dispatch does for ``arrow``, then does not import the others (``expression`` imports Spark).
_HOMES = {
    "RocketMQSQL92": "dialect",
    "Sql92Expression": "expression",
    "compile_sql92": "expression",
    "parse_sql92": "expression",
    "MAX_EXPRESSION_LENGTH": "parser",
    "MAX_NESTING": "parser",
    "Sql92Parser": "parser",
    "JavaType": "tree",
    "Node": "tree",
    "java_type": "tree",
}

__all__ = [
    "parse_sql92",
    "compile_sql92",
    "Sql92Expression",
    "RocketMQSQL92",
    "Sql92Parser",
    "Node",
    "JavaType",
    "java_type",
    "MAX_NESTING",
    "MAX_EXPRESSION_LENGTH",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)
