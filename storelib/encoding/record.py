"""The commitlog record length (``MessageExtEncoder.calMsgLength``): the fixed fields, the body, the
topic with its 1- or 2-byte length, and the properties string; 12 bytes more for each IPv6 host.

>>> import numpy as np
>>> message_length(body_length=0, topic_length=1, properties_length=0)
92
>>> message_lengths(np.array([0, 0]), np.array([1, 128]), np.array([0, 0]), np.array([False, True]), False).tolist()
[92, 232]
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from storelib.model.errors import MessageError, require_int

__all__ = [
    "RECORD_FIXED_FIELDS",
    "RECORD_FIXED_LENGTH",
    "TOPIC_V1_MAX_LENGTH",
    "message_length",
    "message_lengths",
    "body_crc",
    "body_crcs",
    "crc_mismatches",
]

#: The fixed-size fields of a commit log record, in order (all big-endian), as
#: (name, bytes) with IPv4 hosts. Each host is ip + int32 port: 8 bytes, or 20 for IPv6
#: (sysFlag BORNHOST_V6_FLAG / STOREHOSTADDRESS_V6_FLAG). They are followed by
#: BODY[body_length], TOPICLENGTH (1 byte in V1, 2 in V2) + TOPIC[topic_length] and
#: PROPERTIESLENGTH int16 + PROPERTIES[properties_length].
RECORD_FIXED_FIELDS: tuple[tuple[str, int], ...] = (
    ("TOTALSIZE", 4),
    ("MAGICCODE", 4),
    ("BODYCRC", 4),
    ("QUEUEID", 4),
    ("FLAG", 4),
    ("QUEUEOFFSET", 8),
    ("PHYSICALOFFSET", 8),
    ("SYSFLAG", 4),
    ("BORNTIMESTAMP", 8),
    ("BORNHOST", 8),
    ("STORETIMESTAMP", 8),
    ("STOREHOSTADDRESS", 8),
    ("RECONSUMETIMES", 4),
    ("PREPAREDTRANSACTIONOFFSET", 8),
    ("BODYLENGTH", 4),
    ("PROPERTIESLENGTH", 2),
)
#: Longest topic (in bytes) written with a 1-byte length field (MessageVersion V1).
TOPIC_V1_MAX_LENGTH = 127
RECORD_FIXED_LENGTH = sum(size for _, size in RECORD_FIXED_FIELDS)  # 90


def body_crc(body: bytes) -> int:
    """The record's BODYCRC: RocketMQ's ``UtilAll.crc32`` of the body (CRC32 & 0x7FFFFFFF).

    >>> body_crc(b"hi")
    1486039724
    """
    return zlib.crc32(body) & 0x7FFFFFFF


def body_crcs(bodies: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`body_crc` of each body (0 for a null one), as int32: no Arrow kernel computes CRC32, so zlib
    runs once per body, as RocketMQ's client does per message.

    >>> body_crcs(pa.array([b"hi", None])).to_pylist()
    [1486039724, 0]
    """
    return pa.array([0 if b is None else body_crc(b) for b in bodies.to_pylist()], pa.int32())


def crc_mismatches(rows: pa.Table) -> np.ndarray:
    """The indices of the rows (with ``body`` and ``body_crc`` columns) whose body does not match its CRC.

    >>> crc_mismatches(pa.table({"body": [b"hi", b"yo"], "body_crc": pa.array([1486039724, 7], pa.int32())}))
    array([1])
    """
    return np.flatnonzero(body_crcs(rows.column("body")).to_numpy() != rows.column("body_crc").to_numpy())


def message_length(
    *,
    body_length: int,
    topic_length: int,
    properties_length: int,
    born_host_v6: bool = False,
    store_host_v6: bool = False,
) -> int:
    """Total record size of one message; lengths in UTF-8 bytes.

    ``properties_length`` is the stored properties string as written (including a CRC32
    reservation if enabled). RocketMQ picks V2 by the topic's char count, which equals the
    byte count for every legal (ASCII) topic; here the byte count decides.
    """
    require_int(MessageError, "body_length", body_length, 0)
    require_int(MessageError, "topic_length", topic_length, 0)
    require_int(MessageError, "properties_length", properties_length, 0)
    return _length(body_length, topic_length, properties_length, bool(born_host_v6) + bool(store_host_v6))


def message_lengths(
    body: np.ndarray, topic: np.ndarray, properties: np.ndarray, born_v6: bool | np.ndarray, store_v6: bool
) -> np.ndarray:
    """Record sizes over arrays of UTF-8 byte lengths; ``born_v6`` may be a flag per message."""
    return _length(body, topic, properties, np.asarray(born_v6, dtype=np.int64) + int(store_v6))


def _length(body, topic, properties, v6_hosts):
    """``calMsgLength`` for ints or numpy arrays alike: a 16-byte ip instead of 4 for each IPv6 host,
    and a 2-byte topic length past :data:`TOPIC_V1_MAX_LENGTH` bytes."""
    return RECORD_FIXED_LENGTH + 12 * v6_hosts + body + 1 + (topic > TOPIC_V1_MAX_LENGTH) + topic + properties
