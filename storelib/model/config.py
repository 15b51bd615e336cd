"""Store settings, named after the RocketMQ broker and store settings they mirror.

Settings come from keyword arguments, or from Spark configuration keys ``spark.storelib.<name>``
(so ``spark-defaults.conf`` and ``--conf`` work), or from the defaults below, which are RocketMQ's.

>>> StoreConfig().max_message_size
4194304
>>> StoreConfig(store_host="10.0.0.7:10911").store_address
('10.0.0.7', 10911)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import ipaddress
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from storelib.model.errors import ConfigError

__all__ = ["StoreConfig", "SPARK_CONF_PREFIX", "FLUSH_DISK_TYPES", "refuse_unknown_settings"]

SPARK_CONF_PREFIX = "spark.storelib."
#: RocketMQ's ``FlushDiskType`` values (:attr:`StoreConfig.flush_disk_type`).
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")


@dataclass(frozen=True)
class StoreConfig:
    """Settings of one store. Defaults are RocketMQ's, except the three filtering switches.

    A stock broker ships with property filtering, bitmap calculation and the ext queue off; here
    they are on, since filtering is what the store is for. Set all three to ``False`` for a
    broker's defaults: SQL92 subscriptions are then refused and reads evaluate every message.

    >>> StoreConfig(store_host="10.0.0.7:10911").replace(file_reserved_time=48).file_reserved_time
    48
    >>> StoreConfig(max_msg_size=1024)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.ConfigError: max_msg_size: is not a storelib setting; did you mean 'max_message_size'?
        (got 1024)
    """

    #: ``ip:port`` of this store as written into message ids (``brokerIP1`` and ``listenPort``).
    store_host: str = "127.0.0.1:10911"
    #: Largest body accepted, in bytes (``maxMessageSize``, 4 MiB).
    max_message_size: int = 4 * 1024 * 1024
    #: Build index rows for KEYS and UNIQ_KEY (``messageIndexEnable``).
    message_index_enable: bool = True
    #: Write ConsumeQueueExt rows and decorate consume queue tag codes (``enableConsumeQueueExt``).
    enable_consume_queue_ext: bool = True
    #: Allow SQL92 subscriptions (``enablePropertyFilter``).
    enable_property_filter: bool = True
    #: Compute per-message filter bitmaps at dispatch (``enableCalcFilterBitMap``; needs the ext queue).
    enable_calc_filter_bitmap: bool = True
    #: Bloom filter sizing (``maxErrorRateOfBloomFilter``, ``expectConsumerNumUseFilter``).
    max_error_rate_of_bloom_filter: int = 20
    expect_consumer_num_use_filter: int = 32
    #: Queues of a topic created without a count (``defaultTopicQueueNums``).
    default_topic_queue_nums: int = 4
    #: Index key hash slots (``maxHashSlotNum``), for RocketMQ-compatible slot numbers.
    max_hash_slot_num: int = 5_000_000
    #: Index rows are clustered into this many key-hash ranges (files per range stay few).
    index_hash_ranges: int = 64
    #: Target size of data files written by bulk writes and compaction, in bytes.
    target_file_size: int = 128 * 1024 * 1024
    #: Compaction clusters a commitlog file only when every message in it is dispatched and its newest
    #: message is at least this old, in milliseconds (so fresh data stays in append order for pulls).
    cluster_settle_ms: int = 10 * 60 * 1000
    #: A dispatch of at most this many commitlog bytes runs in this process with pyarrow, without a
    #: Spark job (a follower's small increments); larger ones run as one Spark job (0: always Spark).
    dispatch_local_max_bytes: int = 16 * 1024 * 1024
    #: How many times a write retries when another writer committed first.
    max_commit_attempts: int = 50
    #: What a send's ack promises (``flushDiskType``). ``ASYNC_FLUSH``: the commit is in the operating system's
    #: hands (it survives the process, not a power cut: the kernel writes it out within seconds).
    #: ``SYNC_FLUSH``: on a local store the commit's data files, its log entry and their folders' entries are
    #: on the disk (fsync) before the ack. On an object store an ack always means the store took the PUTs.
    flush_disk_type: str = "ASYNC_FLUSH"
    #: The producer processes of one machine hand their groups to one of them, which commits them
    #: together (:mod:`storelib.local.relay`; on Linux, on disk or object storage; set it in every producer process).
    #: Off by default: on a saturated 2-core machine it gave 1.16x the send throughput and a lower
    #: ack, but a 1.2x end-to-end latency (the follower waited longer for a CPU).
    relay_sends: bool = False
    # ---- consuming (PullMessageProcessor, DefaultMessageStore.getMessage, PullRequestHoldService) ----
    #: Pulls of a queue's tail ask the store's follower first, when one serves them (``storelib dispatch
    #: --follow``, unless ``--no-serve-pulls``): it answers from the rows it has just dispatched
    #: (:mod:`storelib.local.tail`; its machine's processes, on Linux). Without a follower serving, or for
    #: anything else, the pull reads the tables.
    tail_pulls: bool = True
    #: Memory (MiB, counting messages at their stored size) the tails a serving follower keeps may take (up to
    #: 5,120 messages of each queue pulled in the last minute): past it, the tails of the queues pulled least
    #: recently are dropped, and their pulls read the tables until asked again.
    tail_pulls_max_mb: int = 256
    #: Permission bits of the whole store (``brokerPermission``): 4 read, 2 write.
    broker_permission: int = 6
    #: Create a consumer group's configuration on first use (``autoCreateSubscriptionGroup``).
    auto_create_subscription_group: bool = True
    #: Bytes of consume queue units one pull may scan for matches (``maxFilterMessageSize``, 800 units).
    max_filter_message_size: int = 16000
    #: Consume queue units per consume queue file (``mappedFileSizeConsumeQueue`` / 20).
    consume_queue_file_units: int = 300_000
    #: isTheBatchFull limits for messages within ``access_message_in_memory_max_ratio`` % of RAM of the end
    #: of the commitlog (``maxTransferBytesOnMessageInMemory``, ``maxTransferCountOnMessageInMemory``) ...
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    #: ... and for older messages (``maxTransferBytesOnMessageInDisk``, ``maxTransferCountOnMessageInDisk``).
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    #: Share of physical memory the newest commitlog bytes are assumed cached in (``accessMessageInMemoryMaxRatio``).
    access_message_in_memory_max_ratio: int = 40
    #: Hold pulls that find nothing until a matching message arrives (``longPollingEnable``) ...
    long_polling_enable: bool = True
    #: ... else hold them this long, then answer (``shortPollingTimeMills``).
    short_polling_time_mills: int = 1000
    #: How often a held pull looks for new consume queue units written by other processes, in ms (a look
    #: costs one file status until the consume queue has a new version).
    long_polling_check_interval_ms: int = 20
    #: Filter a group's retry topic by the group's subscription of each message's original topic
    #: (``filterSupportRetry``; off in a stock broker).
    filter_support_retry: bool = True
    #: Accept class filters given as source text (RocketMQ's ``filterClassSource``) and run that text on
    #: the driver and every executor: arbitrary code from whoever may subscribe. Off by default;
    #: class filters named by import path (installed code) need no switch.
    enable_filter_class_source: bool = False
    #: Longest SQL92 subscription accepted, in characters; longer text is refused before it is parsed
    #: (a subscription is untrusted input, parsed at registration and by pulls that carry their own).
    max_filter_expression_length: int = 65536
    #: Deepest nesting of a SQL92 subscription: parentheses, NOT, unary signs and chained operators.
    max_filter_expression_nesting: int = 100
    #: Delay of each delay level, level 1 first (``messageDelayLevel``).
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: Longest a 5.x timer message may wait, in ms (``timerMaxDelaySec``: 3 days); may be set to years.
    timer_max_delay_ms: int = 3 * 24 * 3600 * 1000
    #: A half message is checked back once it is this old, in ms (``transactionTimeOut``), unless its
    #: own CHECK_IMMUNITY_TIME_IN_SECONDS says later.
    transaction_timeout_ms: int = 6000
    #: Check-backs of one half message before it is given up (``transactionCheckMax``).
    transaction_check_max: int = 15
    #: How often the gRPC endpoint checks back pending half messages, in ms (``transactionCheckInterval``).
    transaction_check_interval_ms: int = 30_000
    #: How long a producer group's checker may take for one message before it counts as UNKNOW, in ms.
    transaction_checker_timeout_ms: int = 3000
    #: Hours a commitlog file is kept after its newest message (``fileReservedTime``).
    file_reserved_time: int = 72
    #: Files in a table's folder that no commit references are deleted by vacuum and compaction once
    #: this many hours old: longer than any job runs, so a write about to commit keeps its files.
    orphan_file_min_age_hours: int = 12
    #: Consumer offset commits kept as separate files before they are merged into one row per queue.
    consumer_offset_compact_files: int = 64
    #: Minutes back that time travel (``VERSION AS OF``, ``versionAsOf``) reaches on every table: Delta's log
    #: entries are kept that long past a checkpoint. 0 keeps them 10 s, for commits whose cost stays flat on
    #: local disk (each commit lists the log's folder; the cost of a longer window is in docs/benchmarks.md).
    #: At most ``orphan_file_min_age_hours``: the files an old version names are kept that long.
    time_travel_minutes: int = 0
    #: Extra Delta table properties for every table the store creates.
    table_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int",) and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ConfigError(f.name, "must be a non-negative integer", value=value)
            if f.type in ("bool",) and not isinstance(value, bool):
                raise ConfigError(f.name, "must be true or false", value=value)
        if self.flush_disk_type not in FLUSH_DISK_TYPES:
            raise ConfigError(
                "flush_disk_type", f"must be one of {', '.join(FLUSH_DISK_TYPES)}", value=self.flush_disk_type
            )
        if self.time_travel_minutes > self.orphan_file_min_age_hours * 60:
            raise ConfigError(
                "time_travel_minutes",
                f"must be at most orphan_file_min_age_hours * 60 ({self.orphan_file_min_age_hours * 60}): the files "
                "an older version names are deleted then",
                value=self.time_travel_minutes,
            )
        self.store_address  # validates store_host
        self.delay_levels_ms  # validates message_delay_level

    @property
    def delta_properties(self) -> dict[str, str]:
        """The Delta table properties these settings give every table: :attr:`table_properties`, with the log
        and tombstone retentions of :attr:`time_travel_minutes` where that is set and the properties do not
        name them (Delta Spark travels no further back than a table keeps its tombstones).

        >>> StoreConfig(time_travel_minutes=90).delta_properties["delta.logRetentionDuration"]
        'interval 90 minutes'
        >>> StoreConfig(time_travel_minutes=721)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        storelib.model.errors.ConfigError: time_travel_minutes: must be at most orphan_file_min_age_hours * 60 (720)...
        """
        out = dict(self.table_properties)
        if self.time_travel_minutes:
            for key in ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration"):
                out.setdefault(key, f"interval {self.time_travel_minutes} minutes")
        return out

    @property
    def store_address(self) -> tuple[str, int]:
        """``(ip, port)`` parsed from :attr:`store_host`; IPv6 as ``[::1]:10911``.

        >>> StoreConfig(store_host="[::1]:10911").store_address, StoreConfig(store_host="[::1]:10911").store_v6
        (('::1', 10911), True)
        """
        host, sep, port = self.store_host.rpartition(":")
        host = host.strip("[]")
        try:
            ipaddress.ip_address(host)
            port_no = int(port)
        except ValueError:
            raise ConfigError("store_host", "must be 'ip:port' with a literal IP address", value=self.store_host)
        if not sep or not 0 <= port_no <= 65535:
            raise ConfigError("store_host", "must be 'ip:port' with a port in 0..65535", value=self.store_host)
        return host, port_no

    @property
    def store_v6(self) -> bool:
        """Whether the store host is IPv6: its messages carry STOREHOSTADDRESS_V6 and 12 more bytes."""
        return ":" in self.store_address[0]

    @functools.cached_property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """Delay of each level in milliseconds, level 1 first (``parseDelayLevel``).

        >>> StoreConfig().delay_levels_ms[:3], len(StoreConfig().delay_levels_ms)
        ((1000, 5000, 10000), 18)
        """
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for part in self.message_delay_level.split():
            unit, number = part[-1:], part[:-1]
            if unit not in units or not number.isdigit():
                raise ConfigError(
                    "message_delay_level",
                    f"{part!r} is not a delay like 5s, 2m, 1h or 1d",
                    value=self.message_delay_level,
                )
            out.append(int(number) * units[unit])
        if not out:
            raise ConfigError("message_delay_level", "needs at least one level", value=self.message_delay_level)
        return tuple(out)

    def replace(self, **changes: Any) -> "StoreConfig":
        """A copy with some settings changed.

        >>> StoreConfig().replace(file_reserved_time=1).file_reserved_time
        1
        >>> StoreConfig().replace(max_msg_size=1)  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        storelib.model.errors.ConfigError: max_msg_size: is not a storelib setting; did you mean 'max_message_size'?
            (got 1)
        """
        return dataclasses.replace(self, **changes)  # __init__ refuses a name it does not have

    @classmethod
    def from_mapping(cls, conf: Mapping[str, str], **overrides: Any) -> "StoreConfig":
        """Build from ``spark.storelib.*`` keys (strings, as Spark holds them), then ``overrides``.

        >>> StoreConfig.from_mapping({"spark.storelib.enable_consume_queue_ext": "true"}).enable_consume_queue_ext
        True
        """
        values: dict[str, Any] = {}
        kinds = {f.name: f.type for f in fields(cls)}
        for key, raw in conf.items():
            if not key.startswith(SPARK_CONF_PREFIX):
                continue
            name = key[len(SPARK_CONF_PREFIX) :]
            if name not in kinds or name == "table_properties":
                raise ConfigError(key, "is not a storelib setting", value=raw)
            values[name] = _parse(key, kinds[name], raw)
        values.update(overrides)
        return cls(**values)  # __init__ refuses a name it does not have


def _parse(key: str, kind: object, raw: str) -> Any:  # kind: a field's annotation, a string here
    text = str(raw).strip()
    if kind == "bool":
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ConfigError(key, "must be true or false", value=raw)
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(key, "must be an integer", value=raw) from None
    return text


def _check_names(settings: Mapping[str, Any], cls: type = StoreConfig, what: str = "storelib setting") -> None:
    """Refuse a setting ``cls`` does not have, naming it (and the closest one it has)."""
    known = {f.name for f in fields(cls)}
    for name, value in settings.items():
        if name not in known:
            close = difflib.get_close_matches(str(name), sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(name, f"is not a {what}{hint}", value=value)


def refuse_unknown_settings(cls: type[Any], what: str) -> type[Any]:
    """Make a settings dataclass refuse a misspelled keyword with :class:`ConfigError` naming it
    (Python's own error would be a ``TypeError`` about ``__init__``).

    >>> @dataclass(frozen=True)
    ... class Knobs:
    ...     speed: int = 1
    >>> Knobs = refuse_unknown_settings(Knobs, "knob")
    >>> Knobs(sped=2)
    Traceback (most recent call last):
    ...
    storelib.model.errors.ConfigError: sped: is not a knob; did you mean 'speed'? (got 2)
    """
    init = cls.__init__

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **settings: Any) -> None:
        _check_names(settings, cls, what)
        init(self, *args, **settings)

    cls.__init__ = checked
    return cls


refuse_unknown_settings(StoreConfig, "storelib setting")
