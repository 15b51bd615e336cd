"""Store message ids (``MessageDecoder.createMessageId`` / ``decodeMessageId``): the store host's ip
bytes, its port (int32) and the commitlog offset (int64), upper-case hex: 32 characters for an IPv4
host, 56 for IPv6.

>>> create_message_id("10.0.0.1", 10911, 4096)
'0A00000100002A9F0000000000001000'
>>> decode_message_id("0A00000100002A9F0000000000001000")
('10.0.0.1', 10911, 4096)
>>> import numpy as np
>>> message_ids(message_id_prefix("10.0.0.1", 10911), np.array([0, 4096])).to_pylist()[1]
'0A00000100002A9F0000000000001000'
"""

from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pyarrow as pa

from storelib.encoding.arrow import hex_bytes, hex_strings
from storelib.model.errors import MessageIdError, require_int

__all__ = ["create_message_id", "decode_message_id", "message_ids", "ip_bytes", "message_id_prefix"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def ip_bytes(field: str, host: object) -> bytes:
    """Address bytes of an IP literal; an IPv4-mapped IPv6 address counts as IPv4, as in Java.

    >>> ip_bytes("host", "::ffff:10.0.0.1")
    b'\\n\\x00\\x00\\x01'
    """
    if not isinstance(host, str):
        raise MessageIdError(field, "must be an IP address string", value=host)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise MessageIdError(field, "not an IPv4 or IPv6 address literal", value=host) from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed


def create_message_id(host: str, port: int, commitlog_offset: int) -> str:
    """The id of the message at ``commitlog_offset`` of the store at ``host:port``.

    The offset may be any Java ``long``, as in RocketMQ.

    >>> create_message_id("127.0.0.1", 10911, 1)
    '7F00000100002A9F0000000000000001'
    """
    ip = ip_bytes("host", host)
    require_int(MessageIdError, "port", port, 0, 0xFFFF)
    require_int(MessageIdError, "commitlog_offset", commitlog_offset, _INT64_MIN, _INT64_MAX)
    return (ip + struct.pack(">iq", port, commitlog_offset)).hex().upper()


def message_id_prefix(host: str, port: int) -> str:
    """The part of every id of one store that does not change: ip bytes and port, upper-case hex.

    >>> message_id_prefix("127.0.0.1", 10911)
    '7F00000100002A9F'
    """
    return create_message_id(host, port, 0)[:-16]


def message_ids(prefix: str, commitlog_offsets: np.ndarray) -> pa.Array:
    """The ids of the messages at non-negative ``commitlog_offsets`` of the store whose
    :func:`message_id_prefix` is ``prefix``, as an Arrow array (no Python per row)."""
    return hex_strings(prefix, commitlog_offsets, 16)


def _ip_text(raw: bytes) -> str:
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped or ip)  # Java's InetAddress.getByAddress does the same mapping


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """(host, port, commitlog_offset) of an id; lowercase hex is accepted.

    IPv6 hosts come back in compressed form (an IPv4-mapped one as dotted IPv4, like Java);
    a port outside [0, 65535] is refused as Java's ``InetSocketAddress`` refuses it.

    >>> decode_message_id("7f00000100002a9f0000000000000001")
    ('127.0.0.1', 10911, 1)
    """
    raw = hex_bytes("msg_id", msg_id, (32, 56))
    ip_len = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    if not 0 <= port <= 0xFFFF:
        raise MessageIdError("msg_id", f"port out of range: {port}", value=msg_id)
    return _ip_text(raw[:ip_len]), port, offset
