"""RocketMQ's SQL92 message selector: grammar, typed tree, Java semantics and its compilations.

``parser`` reads a text into the typed tree of ``tree`` (``lexer`` supplies the tokens), ``java``
evaluates it as RocketMQ's Java code does, ``states`` derives the tables the compilations share,
``spark`` and ``arrow`` compile it to a Spark Column and to vectorized Arrow evaluation, ``dialect``
is the language as a sqlglot dialect (Spark SQL for display) and ``expression`` ties them together.

>>> str(parse_sql92("a between 1 and 5 and TAGS in ('TagA','TagB')"))
"a BETWEEN 1 AND 5 AND TAGS IN ('TagA', 'TagB')"
"""

from storelib.filter.sql92.dialect import RocketMQSQL92
from storelib.filter.sql92.expression import Sql92Expression, compile_sql92, parse_sql92
from storelib.filter.sql92.parser import MAX_EXPRESSION_LENGTH, MAX_NESTING, Sql92Parser
from storelib.filter.sql92.tree import Node

__all__ = [
    "parse_sql92",
    "compile_sql92",
    "Sql92Expression",
    "RocketMQSQL92",
    "Sql92Parser",
    "Node",
    "MAX_NESTING",
    "MAX_EXPRESSION_LENGTH",
]
