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
import ipaddress
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from storelib.errors import ConfigError

__all__ = ["StoreConfig", "SPARK_CONF_PREFIX"]

SPARK_CONF_PREFIX = "spark.storelib."


@dataclass(frozen=True)
class StoreConfig:
    """Settings of one store. Defaults are RocketMQ's, except the three filtering switches.

    A stock broker ships with property filtering, bitmap calculation and the ext queue off; here
    they are on, since filtering is what the store is for. Set all three to ``False`` for a
    broker's defaults: SQL92 subscriptions are then refused and reads evaluate every message.
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
    #: How many times a write retries when another writer committed first.
    max_commit_attempts: int = 50
    #: Extra Delta table properties for every table the store creates.
    table_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int",) and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ConfigError(f.name, "must be a non-negative integer", value=value)
            if f.type in ("bool",) and not isinstance(value, bool):
                raise ConfigError(f.name, "must be true or false", value=value)
        self.store_address  # validates store_host

    @property
    def store_address(self) -> tuple[str, int]:
        """``(ip, port)`` parsed from :attr:`store_host`; IPv6 as ``[::1]:10911``."""
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

    def replace(self, **changes: Any) -> "StoreConfig":
        """A copy with some settings changed."""
        return dataclasses.replace(self, **changes)

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
            name = key[len(SPARK_CONF_PREFIX):]
            if name not in kinds or name == "table_properties":
                raise ConfigError(key, "is not a storelib setting", value=raw)
            values[name] = _parse(key, kinds[name], raw)
        values.update(overrides)
        return cls(**values)


def _parse(key: str, kind: str, raw: str) -> Any:
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
