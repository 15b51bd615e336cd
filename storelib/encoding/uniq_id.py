"""Client unique ids (``MessageClientIDSetter``), RocketMQ's client-side message id kept as the
UNIQ_KEY property: a fixed prefix (ip bytes, int16 pid, int32 seed), then int32 milliseconds since
the start of the month and an int16 counter, upper-case hex. Also the one place that finds this
host's address (:func:`local_ip`), for born hosts and id prefixes alike.

>>> UniqIdGenerator("10.0.0.1", pid=1, seed=0).next_id(now_ms=1709251200005)
'0A000001000100000000000000050000'
>>> decode_uniq_id_time("0A0000010001000000000000000500A0", now_ms=1709251200006)
1709251200005
"""

from __future__ import annotations

import ipaddress  # noqa: F401  (the doctest)
import os
import random
import socket
import struct
import threading
from datetime import date, timedelta

import numpy as np
import pyarrow as pa

from storelib.encoding.arrow import hex_bytes, hex_strings
from storelib.encoding.message_id import ip_bytes
from storelib.model.errors import MessageIdError, require_int
from storelib.model.timestamps import now_ms

__all__ = ["UniqIdGenerator", "uniq_id_prefix_hex", "decode_uniq_id_time", "month_start_ms", "local_ip", "uniq_ids"]

_INT64_MIN = -(1 << 63)
_EPOCH, _DAY_MS, _NTP_TOLERANCE_MS = date(1970, 1, 1), 86_400_000, 1_000_000


def month_start_ms(ms: int, months: int = 0) -> int:
    """Epoch ms of 00:00 UTC on the 1st of the month containing ``ms``, shifted by ``months``.

    >>> month_start_ms(1709251200005), month_start_ms(1709251200005, -1)
    (1709251200000, 1706745600000)
    """
    day = _EPOCH + timedelta(days=ms // _DAY_MS)
    year, month0 = divmod(day.year * 12 + day.month - 1 + months, 12)
    return (date(year, month0 + 1, 1) - _EPOCH).days * _DAY_MS


def local_ip() -> str:
    """This host's IPv4 address: that of the outbound interface, else the host name's, else loopback
    (Java scans the interfaces instead).

    >>> ipaddress.ip_address(local_ip()).version
    4
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1; a UDP connect sends nothing
            return probe.getsockname()[0]
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def uniq_id_prefix_hex(ip: str | None = None, pid: int | None = None, seed: int | None = None) -> str:
    """Fixed uniq-id prefix: ip bytes + int16 pid + int32 seed, uppercase hex (20 chars for IPv4).

    Defaults: :func:`local_ip`, ``os.getpid()``, a random seed (Java: the classloader's hash).

    >>> uniq_id_prefix_hex("10.0.0.1", pid=1, seed=-1)
    '0A0000010001FFFFFFFF'
    """
    raw = ip_bytes("ip", local_ip() if ip is None else ip)
    pid = os.getpid() if pid is None else pid
    seed = random.getrandbits(32) if seed is None else seed
    require_int(MessageIdError, "pid", pid)
    require_int(MessageIdError, "seed", seed)
    return (raw + struct.pack(">HI", pid & 0xFFFF, seed & 0xFFFFFFFF)).hex().upper()


class UniqIdGenerator:
    """Thread-safe ``createUniqID``: prefix + int32 ms since month start + int16 counter.

    The month starts at 00:00 UTC (Java uses the JVM's local time zone). The counter starts
    at 0 and wraps at 65536. Like Java, a clock less than 1000 s behind the month start
    gives 0 ms; unlike Java, a time further back moves the window back to its own month.
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
        now = _clock() if now_ms is None else now_ms
        with self._lock:
            if now >= self._next_start or now <= self._start - _NTP_TOLERANCE_MS:
                self._start = month_start_ms(now)
                self._next_start = month_start_ms(now, 1)
            diff = max(now - self._start, 0)
            counter, self._counter = self._counter, (self._counter + 1) & 0xFFFF
        return f"{self.prefix}{diff & 0xFFFFFFFF:08X}{counter:04X}"


_clock = now_ms  # the clock (model.timestamps), under a name the ``now_ms`` arguments do not hide


def uniq_ids(prefix: str, tails: np.ndarray) -> pa.Array:
    """Uniq ids of a whole batch: ``prefix`` (20 hex chars for IPv4) then the 12 hex digits of each
    of ``tails`` (ms since the month's start << 16, plus a counter).

    >>> uniq_ids("0A0000010001FFFFFFFF", np.array([5 << 16])).to_pylist()
    ['0A0000010001FFFFFFFF000000050000']
    """
    return hex_strings(prefix, tails, 12)


def decode_uniq_id_time(uniq_id: str, now_ms: int | None = None) -> int:
    """Epoch ms a uniq id was made (``getNearlyTimeFromID``, UTC months).

    The id holds ms since a month start; it is read against the month of ``now_ms``
    (default now), or the previous month if that would not lie before ``now_ms``.
    """
    raw = hex_bytes("uniq_id", uniq_id, (32, 56))
    (span,) = struct.unpack_from(">I", raw, len(raw) - 6)
    now = _clock() if now_ms is None else now_ms
    start = month_start_ms(now)
    if start + span >= now:
        start = month_start_ms(now, -1)
    return start + span
