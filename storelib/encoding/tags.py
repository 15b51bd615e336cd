"""ConsumeQueue tag codes (``tagsString2tagsCode``): ``String.hashCode`` of the whole TAGS string,
0 where a message has none. What a consume queue unit holds, unless it holds an ext address.

>>> import pyarrow as pa
>>> tags_code("TagA"), tags_code(None), tags_code("TagA||TagB")
(2598919, 0, 1789476431)
>>> tags_codes(pa.array(["TagA||TagB", None, ""])).tolist()
[1789476431, 0, 0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from storelib.encoding.hashcode import java_hash_code_column, java_hash_codes, java_string_hash

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["tags_code", "tags_codes", "tags_code_column"]


def tags_code(tags: str | None) -> int:
    """The tag code of one TAGS string: 0 for no tags, else the hash of the whole string."""
    return java_string_hash(tags) if tags else 0


def tags_codes(tags: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Tag codes of a whole Arrow array as int64: 0 where absent or empty."""
    return java_hash_codes(tags).astype(np.int64)


def tags_code_column(tags: "Column") -> "Column":
    """Tag codes of a string column, as bigint.

    >>> spark.range(1).select(tags_code_column(F.lit("TagA")).alias("c")).first().c
    2598919
    """
    from pyspark.sql import functions as F

    return (
        F.when(F.coalesce(F.length(tags), F.lit(0)) == 0, F.lit(0)).otherwise(java_hash_code_column(tags)).cast("long")
    )
