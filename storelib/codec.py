"""RocketMQ's byte-level encodings, reproduced bit for bit in pure Python (stdlib only).

Java ``String.hashCode`` (tag codes, IndexFile keys), message ids (store host + commit log
offset), ConsumeQueueExt address decoration, the commit log record length, the properties
string and client-side unique ids (``MessageClientIDSetter``). Java's signed 32/64-bit
wrapping arithmetic is emulated explicitly; hex output is uppercase as RocketMQ writes it.
"""

from __future__ import annotations

import ipaddress
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Mapping
from datetime import date, timedelta

from storelib.errors import MessageError, MessageIdError, StoreError, require_int

__all__ = [
    "java_string_hash", "tags_code", "create_message_id", "decode_message_id", "MAX_EXT_ADDR",
    "is_ext_addr", "decorate_ext_addr", "undecorate_ext_addr", "index_key_hash", "index_slot",
    "build_index_key", "RECORD_FIXED_FIELDS", "RECORD_FIXED_LENGTH", "TOPIC_V1_MAX_LENGTH", "message_length",
    "NAME_VALUE_SEPARATOR", "PROPERTY_SEPARATOR", "properties_to_string", "string_to_properties",
    "UniqIdGenerator", "uniq_id_prefix_hex", "decode_uniq_id_time", "month_start_ms",
]

_INT32_MIN, _INT64_MIN, _INT64_MAX = -(1 << 31), -(1 << 63), (1 << 63) - 1
_HEX = frozenset("0123456789abcdefABCDEF")


def _int64(value: int) -> int:
    """Wrap an unbounded int to Java's signed 64-bit range."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >> 63 else value


# --- Java String.hashCode -------------------------------------------------------------------
def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` (over UTF-16 code units) as a signed 32-bit int.

    >>> java_string_hash("TagA"), java_string_hash("a\\U0001F600b")
    (2598919, 57849694)
    """
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")
    else:  # supplementary characters become two surrogate units, exactly as in Java
        data = s.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(data) // 2}H", data)
    h = 0
    for start in range(0, len(units), 64):  # mask per chunk: small ints, no per-unit masking
        for unit in units[start:start + 64]:
            h = 31 * h + unit
        h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """ConsumeQueue tag code (``tagsString2tagsCode``): 0 for no tags, else the hash of the whole string.

    >>> tags_code(None), tags_code("TagA||TagB")
    (0, 1789476431)
    """
    return java_string_hash(tags) if tags else 0


# --- Message id: store host + commit log offset ---------------------------------------------
def _ip_bytes(field: str, host: object) -> bytes:
    """Address bytes of an IP literal; an IPv4-mapped IPv6 address counts as IPv4, as in Java."""
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
    """``MessageDecoder.createMessageId``: ip bytes + int32 port + int64 offset, uppercase hex.

    32 chars for an IPv4 host (``::ffff:a.b.c.d`` is IPv4, as Java treats it), 56 for IPv6.
    The offset may be any Java ``long``, as in RocketMQ.

    >>> create_message_id("127.0.0.1", 10911, 1)
    '7F00000100002A9F0000000000000001'
    """
    ip = _ip_bytes("host", host)
    require_int(MessageIdError, "port", port, 0, 0xFFFF)
    require_int(MessageIdError, "commitlog_offset", commitlog_offset, _INT64_MIN, _INT64_MAX)
    return (ip + struct.pack(">iq", port, commitlog_offset)).hex().upper()


def _hex_bytes(field: str, text: object, lengths: tuple[int, ...]) -> bytes:
    if not isinstance(text, str):
        raise MessageIdError(field, "must be a hex string", value=text)
    if len(text) not in lengths:
        expected = " or ".join(map(str, lengths))
        raise MessageIdError(field, f"length is {len(text)}, expected {expected} hex chars", value=text)
    for pos, char in enumerate(text):
        if char not in _HEX:
            raise MessageIdError(field, f"non-hex character {char!r} at position {pos}", value=text)
    return bytes.fromhex(text)


def _ip_text(raw: bytes) -> str:
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped or ip)  # Java's InetAddress.getByAddress does the same mapping


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """``MessageDecoder.decodeMessageId``: (host, port, commitlog_offset); lowercase hex is accepted.

    IPv6 hosts come back in compressed form (an IPv4-mapped one as dotted IPv4, like Java);
    a port outside [0, 65535] is refused as Java's ``InetSocketAddress`` refuses it.

    >>> decode_message_id("7f00000100002a9f0000000000000001")
    ('127.0.0.1', 10911, 1)
    """
    raw = _hex_bytes("msg_id", msg_id, (32, 56))
    ip_len = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    if not 0 <= port <= 0xFFFF:
        raise MessageIdError("msg_id", f"port out of range: {port}", value=msg_id)
    return _ip_text(raw[:ip_len]), port, offset


# --- ConsumeQueueExt addresses --------------------------------------------------------------
#: Largest value that is a ConsumeQueueExt address rather than a tag code (Integer.MIN_VALUE - 1).
MAX_EXT_ADDR = -2147483649


def is_ext_addr(addr: int) -> bool:
    """True when a ConsumeQueue ``tagsCode`` field holds a decorated ConsumeQueueExt address.

    >>> is_ext_addr(-2147483648), is_ext_addr(-2147483649)
    (False, True)
    """
    return addr <= MAX_EXT_ADDR


def decorate_ext_addr(offset: int) -> int:
    """ConsumeQueueExt ``decorate``: ``offset + Long.MIN_VALUE`` (wrapping) unless already an address.

    >>> decorate_ext_addr(1)
    -9223372036854775807
    """
    require_int(StoreError, "offset", offset, _INT64_MIN, _INT64_MAX)
    return offset if is_ext_addr(offset) else _int64(offset + _INT64_MIN)


def undecorate_ext_addr(addr: int) -> int:
    """ConsumeQueueExt ``unDecorate``: ``addr - Long.MIN_VALUE`` (wrapping) if an address, else unchanged.

    >>> undecorate_ext_addr(-9223372036854775807)
    1
    """
    require_int(StoreError, "addr", addr, _INT64_MIN, _INT64_MAX)
    return _int64(addr - _INT64_MIN) if is_ext_addr(addr) else addr


# --- IndexFile keys -------------------------------------------------------------------------
def build_index_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: ``topic#key``.

    >>> build_index_key("TopicTest", "order-1")
    'TopicTest#order-1'
    """
    return f"{topic}#{key}"


def index_key_hash(index_key: str) -> int:
    """IndexFile key hash: ``abs(hashCode)``, with ``Integer.MIN_VALUE`` mapped to 0.

    >>> index_key_hash("TopicTest#erAHomt")
    0
    """
    h = java_string_hash(index_key)
    return 0 if h == _INT32_MIN else abs(h)


def index_slot(index_key: str, slots: int = 5_000_000) -> int:
    """Hash slot of ``index_key`` in an IndexFile with ``slots`` slots (``hashSlotNum``).

    >>> index_slot("#")
    35
    """
    require_int(StoreError, "slots", slots, 1)
    return index_key_hash(index_key) % slots


# --- Commit log record length ---------------------------------------------------------------
#: The fixed-size fields of a commit log record, in order (all big-endian), as
#: (name, bytes) with IPv4 hosts. Each host is ip + int32 port: 8 bytes, or 20 for IPv6
#: (sysFlag BORNHOST_V6_FLAG / STOREHOSTADDRESS_V6_FLAG). They are followed by
#: BODY[body_length], TOPICLENGTH (1 byte in V1, 2 in V2) + TOPIC[topic_length] and
#: PROPERTIESLENGTH int16 + PROPERTIES[properties_length].
RECORD_FIXED_FIELDS: tuple[tuple[str, int], ...] = (
    ("TOTALSIZE", 4), ("MAGICCODE", 4), ("BODYCRC", 4), ("QUEUEID", 4), ("FLAG", 4),
    ("QUEUEOFFSET", 8), ("PHYSICALOFFSET", 8), ("SYSFLAG", 4), ("BORNTIMESTAMP", 8),
    ("BORNHOST", 8), ("STORETIMESTAMP", 8), ("STOREHOSTADDRESS", 8), ("RECONSUMETIMES", 4),
    ("PREPAREDTRANSACTIONOFFSET", 8), ("BODYLENGTH", 4), ("PROPERTIESLENGTH", 2),
)
#: Longest topic (in bytes) written with a 1-byte length field (MessageVersion V1).
TOPIC_V1_MAX_LENGTH = 127
RECORD_FIXED_LENGTH = sum(size for _, size in RECORD_FIXED_FIELDS)  # 90


def message_length(*, body_length: int, topic_length: int, properties_length: int,
                   born_host_v6: bool = False, store_host_v6: bool = False) -> int:
    """Total commit log record size (``MessageExtEncoder.calMsgLength``); lengths in UTF-8 bytes.

    ``properties_length`` is the stored properties string as written (including a CRC32
    reservation if enabled). RocketMQ picks V2 by the topic's char count, which equals the
    byte count for every legal (ASCII) topic; here the byte count decides.

    >>> message_length(body_length=0, topic_length=1, properties_length=0)
    92
    """
    require_int(MessageError, "body_length", body_length, 0)
    require_int(MessageError, "topic_length", topic_length, 0)
    require_int(MessageError, "properties_length", properties_length, 0)
    topic_len_size = 1 if topic_length <= TOPIC_V1_MAX_LENGTH else 2
    v6_extra = 12 * (bool(born_host_v6) + bool(store_host_v6))  # 16-byte instead of 4-byte ip
    return (RECORD_FIXED_LENGTH + v6_extra
            + body_length + topic_len_size + topic_length + properties_length)


# --- Properties string ----------------------------------------------------------------------
NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"


def properties_to_string(props: Mapping[str, str]) -> str:
    """``messageProperties2String``: ``name\\x01value\\x02`` per property (trailing separator kept).

    Properties whose value is None are skipped, as in RocketMQ.

    >>> properties_to_string({"TAGS": "a", "KEYS": "k"})
    'TAGS\\x01a\\x02KEYS\\x01k\\x02'
    """
    return "".join(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                   for name, value in props.items() if value is not None)


def string_to_properties(s: str) -> dict[str, str]:
    """``string2messageProperties``: parse the properties string; the last duplicate wins.

    Entries with an empty name or empty value, or without a name/value separator, are dropped;
    the name ends at the first ``\\x01`` so a value may contain ``\\x01``.

    >>> string_to_properties("TAGS\\x01a\\x02\\x01x\\x02KEYS\\x01k")
    {'TAGS': 'a', 'KEYS': 'k'}
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


# --- Client unique ids (MessageClientIDSetter) ----------------------------------------------
_EPOCH, _DAY_MS, _NTP_TOLERANCE_MS = date(1970, 1, 1), 86_400_000, 1_000_000


def month_start_ms(ms: int, months: int = 0) -> int:
    """Epoch ms of 00:00 UTC on the 1st of the month containing ``ms``, shifted by ``months``."""
    day = _EPOCH + timedelta(days=ms // _DAY_MS)
    year, month0 = divmod(day.year * 12 + day.month - 1 + months, 12)
    return (date(year, month0 + 1, 1) - _EPOCH).days * _DAY_MS


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _local_ip() -> str:
    """The IPv4 address of the outbound interface (Java scans the interfaces instead)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1; a UDP connect sends nothing
            return probe.getsockname()[0]
    except OSError:  # no route: a fake address from the clock, like Java's createFakeIP
        return str(ipaddress.IPv4Address(_now_ms() & 0xFFFFFFFF))


def uniq_id_prefix_hex(ip: str | None = None, pid: int | None = None, seed: int | None = None) -> str:
    """Fixed uniq-id prefix: ip bytes + int16 pid + int32 seed, uppercase hex (20 chars for IPv4).

    Defaults: a local IPv4 address, ``os.getpid()``, a random seed (Java: the classloader's hash).

    >>> uniq_id_prefix_hex("10.0.0.1", pid=1, seed=-1)
    '0A0000010001FFFFFFFF'
    """
    raw = _ip_bytes("ip", _local_ip() if ip is None else ip)
    pid = os.getpid() if pid is None else pid
    seed = random.getrandbits(32) if seed is None else seed
    require_int(MessageIdError, "pid", pid)
    require_int(MessageIdError, "seed", seed)
    return (raw + struct.pack(">HI", pid & 0xFFFF, seed & 0xFFFFFFFF)).hex().upper()


class UniqIdGenerator:
    """Thread-safe ``MessageClientIDSetter.createUniqID``: prefix + int32 ms since month start + int16 counter.

    The month starts at 00:00 UTC (Java uses the JVM's local time zone). The counter starts
    at 0 and wraps at 65536. Like Java, a clock less than 1000 s behind the month start
    gives 0 ms; unlike Java, a time further back moves the window back to its own month.

    >>> UniqIdGenerator("10.0.0.1", pid=1, seed=0).next_id(now_ms=1709251200005)
    '0A000001000100000000000000050000'
    """

    def __init__(self, ip: str | None = None, pid: int | None = None, seed: int | None = None):
        self.prefix: str = uniq_id_prefix_hex(ip, pid, seed)
        self._lock = threading.Lock()
        self._counter = 0
        self._start = self._next_start = _INT64_MIN  # first call sets the month window

    def next_id(self, now_ms: int | None = None) -> str:
        """Next id for time ``now_ms`` (epoch ms, default now).

        >>> UniqIdGenerator("10.0.0.1", pid=1, seed=0).next_id(now_ms=0)[-12:]
        '000000000000'
        """
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if now >= self._next_start or now <= self._start - _NTP_TOLERANCE_MS:
                self._start = month_start_ms(now)
                self._next_start = month_start_ms(now, 1)
            diff = max(now - self._start, 0)
            counter, self._counter = self._counter, (self._counter + 1) & 0xFFFF
        return f"{self.prefix}{diff & 0xFFFFFFFF:08X}{counter:04X}"


def decode_uniq_id_time(uniq_id: str, now_ms: int | None = None) -> int:
    """Epoch ms a uniq id was made (``getNearlyTimeFromID``, UTC months).

    The id holds ms since a month start; it is read against the month of ``now_ms``
    (default now), or the previous month if that would not lie before ``now_ms``.

    >>> decode_uniq_id_time("0A0000010001000000000000000500A0", now_ms=1709251200006)
    1709251200005
    """
    raw = _hex_bytes("uniq_id", uniq_id, (32, 56))
    (span,) = struct.unpack_from(">I", raw, len(raw) - 6)
    now = _now_ms() if now_ms is None else now_ms
    start = month_start_ms(now)
    if start + span >= now:
        start = month_start_ms(now, -1)
    return start + span
