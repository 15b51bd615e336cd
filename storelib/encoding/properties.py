"""The properties string (``MessageDecoder.messageProperties2String`` / ``string2messageProperties``):
``name\\x01value\\x02`` per property. Its two separators may appear in no name, value, tag or key.

>>> properties_to_string({"TAGS": "a", "KEYS": "k"})
'TAGS\\x01a\\x02KEYS\\x01k\\x02'
>>> string_to_properties("TAGS\\x01a\\x02\\x01x\\x02KEYS\\x01k")
{'TAGS': 'a', 'KEYS': 'k'}
"""

from __future__ import annotations

from collections.abc import Mapping

from storelib.model.message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

__all__ = ["NAME_VALUE_SEPARATOR", "PROPERTY_SEPARATOR", "properties_to_string", "string_to_properties"]



def properties_to_string(props: Mapping[str, str]) -> str:
    """The properties string of ``props`` (trailing separator kept); None values are skipped, as in RocketMQ.

    >>> properties_to_string({"a": "1", "b": None})
    'a\\x011\\x02'
    """
    return "".join(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                   for name, value in props.items() if value is not None)


def string_to_properties(s: str) -> dict[str, str]:
    """Parse a properties string; the last duplicate wins.

    Entries with an empty name or empty value, or without a name/value separator, are dropped;
    the name ends at the first ``\\x01`` so a value may contain ``\\x01``.

    >>> string_to_properties("a\\x01x\\x01y\\x02")
    {'a': 'x\\x01y'}
    """
    result: dict[str, str] = {}
    index, end_all = 0, len(s or "")
    while index < end_all:
        end = s.find(PROPERTY_SEPARATOR, index)
        if end < 0:
            end = end_all
        sep = s.find(NAME_VALUE_SEPARATOR, index, end)
        if index < sep < end - 1:
            result[s[index:sep]] = s[sep + 1:end]
        index = end + 1
    return result
