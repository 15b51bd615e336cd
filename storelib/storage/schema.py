"""The store's tables and their columns: the one place they are defined and documented.

Details: ``docs/internals.md``, section storelib.storage.schema.

>>> TABLES["consume_queue"].arrow.names
['topic', 'queue_id', 'queue_offset', 'commitlog_offset', 'size', 'tags_code', 'store_timestamp']
"""

from __future__ import annotations

import pyarrow as pa

from storelib.delta.spec import TableSpec

__all__ = [
    "TableSpec",
    "TABLES",
    "COMMITLOG",
    "COMMITLOG_SUMMARY",
    "CLUSTERED_ROW_GROUP_ROWS",
    "CONSUME_QUEUE",
    "CONSUME_QUEUE_EXT",
    "EXT_SUMMARY",
    "INDEX",
    "TOPIC_CONFIG",
    "SUBSCRIPTION",
    "SUBSCRIPTION_GROUP",
    "CONSUMER_OFFSET",
    "TRANSACTION_CHECKER",
    "COMMITLOG_EXPIRED",
    "POP_LOG",
]

TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES = pa.map_(pa.string(), pa.string())


def _f(name: str, kind: pa.DataType, comment: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable=nullable, metadata={"comment": comment})


#: Settings tables (topics, groups, subscriptions, checkers) change seldom: on an object store their views look
#: for other processes' changes once a second (this process's own are seen at once). So do the summaries: their
#: rows describe data files by path, which never change, so a view a second old only skips less.
CONFIG_LOOK_S = 1.0

COMMITLOG = TableSpec(
    "commitlog",
    pa.schema(
        [
            _f(
                "physical_offset",
                pa.int64(),
                "Commitlog offset: running byte position; physical_offset + size is the next message's",
                False,
            ),
            _f("size", pa.int32(), "Encoded message size in bytes, as RocketMQ's calMsgLength", False),
            _f(
                "topic",
                pa.string(),
                "Topic the message was stored under (a system topic for delayed and prepared messages)",
                False,
            ),
            _f("queue_id", pa.int32(), "Queue of the topic", False),
            _f("queue_offset", pa.int64(), "Position in the (topic, queue_id) consume queue, contiguous from 0", False),
            _f("sysflag", pa.int32(), "RocketMQ MessageSysFlag bits (transaction type, IPv6 hosts, multi tags)", False),
            _f("flag", pa.int32(), "User flag of the message", False),
            _f("body_crc", pa.int32(), "CRC32 of the body, & 0x7FFFFFFF as RocketMQ stores it", False),
            _f("born_timestamp", TIMESTAMP, "When the producer created the message", False),
            _f("born_host", pa.string(), "Producer host as ip:port", False),
            _f("store_timestamp", TIMESTAMP, "When the store appended the message", False),
            _f("store_host", pa.string(), "Store host as ip:port (part of msg_id)", False),
            _f("reconsume_times", pa.int32(), "Times the message was sent back for redelivery", False),
            _f(
                "prepared_transaction_offset",
                pa.int64(),
                "Commitlog offset of the prepared message a commit/rollback refers to",
                False,
            ),
            _f(
                "properties",
                PROPERTIES,
                "All message properties with RocketMQ's names (TAGS, KEYS, UNIQ_KEY, user properties)",
                False,
            ),
            _f("body", pa.binary(), "Message body", False),
            _f("msg_id", pa.string(), "Store message id: store host, port and physical_offset in upper-case hex"),
            _f("tags", pa.string(), "Copy of the TAGS property, for column pruning"),
            _f("keys", pa.string(), "Copy of the KEYS property (space-separated), for column pruning"),
            _f("uniq_key", pa.string(), "Copy of the UNIQ_KEY property: the producer-side message id"),
            _f(
                "cluster_seq",
                pa.int64(),
                "Position in a clustered file: its first physical_offset plus the row's rank "
                "in the file's (topic, tags, clustering keys, bitmap) order; null until the "
                "row is clustered",
            ),
        ]
    ),
    sort_by=("physical_offset",),
    description="Every message in append order (RocketMQ's CommitLog).",
    row_group_rows=8 * 1024,  # a pull of 32 messages decodes ~1 MiB, not a 64k-message row group
    dictionary=(
        "topic",
        "queue_id",
        "sysflag",
        "flag",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "properties.key_value.key",
        "tags",
    ),
    statistics=(
        "physical_offset",
        "size",
        "topic",
        "queue_id",
        "queue_offset",
        "sysflag",
        "born_timestamp",
        "store_timestamp",
        "tags",
        "cluster_seq",
    ),
    # what views are asked (offsets, a topic's files, a filtered read's plan); every process brings its
    # view forward at each send
    view_statistics=(
        "physical_offset",
        "topic",
        "queue_id",
        "queue_offset",
        "sysflag",
        "store_timestamp",
        "cluster_seq",
    ),
)

#: Rows per row group of a clustered commitlog file: the unit a filtered read skips or reads, and
#: what a point read decodes to find one message.
CLUSTERED_ROW_GROUP_ROWS = 1024

COMMITLOG_SUMMARY = TableSpec(
    "commitlog_summary",
    pa.schema(
        [
            _f("path", pa.string(), "Clustered commitlog data file this row sums up (Delta add path)", False),
            _f(
                "row_group",
                pa.int32(),
                "Row group of the file: its rows are [row_group * n, (row_group + 1) * n) "
                "of the file, n = the file's row group size",
                False,
            ),
            _f("topic", pa.string(), "Topic of the row group's first row", False),
            _f("topics", pa.int32(), "Distinct topics in the row group", False),
            _f("num_records", pa.int64(), "Rows in the row group", False),
            _f("cluster_seq_min", pa.int64(), "Lowest cluster_seq of the row group", False),
            _f("cluster_seq_max", pa.int64(), "Highest cluster_seq of the row group", False),
            _f("filter_bitmap_or", pa.binary(), "OR of every row's filter bitmap; null when some row has none"),
            _f("filter_version_min", pa.int64(), "Lowest filter_version of the row group's rows"),
            _f(
                "tags_codes",
                pa.list_(pa.int64()),
                "Distinct tag codes of the row group's rows; null when there are more than 64",
            ),
            _f(
                "no_hit",
                pa.list_(pa.string()),
                "SQL92 subscriptions ('group@version') whose Bloom bits no row's bitmap hits",
            ),
        ]
    ),
    cluster_by=("topic",),
    description=(
        "One row per row group of a clustered commitlog file: what its tag codes and bitmaps can "
        "match, so a filtered read skips row groups without opening them."
    ),
    remote_look_s=CONFIG_LOOK_S,
)

CONSUME_QUEUE = TableSpec(
    "consume_queue",
    pa.schema(
        [
            _f("topic", pa.string(), "Topic", False),
            _f("queue_id", pa.int32(), "Queue of the topic", False),
            _f("queue_offset", pa.int64(), "Position in the queue, contiguous from 0", False),
            _f("commitlog_offset", pa.int64(), "physical_offset of the message in commitlog", False),
            _f("size", pa.int32(), "Message size in bytes", False),
            _f(
                "tags_code", pa.int64(), "Java String.hashCode of TAGS, or a decorated consume_queue_ext address", False
            ),
            _f("store_timestamp", TIMESTAMP, "Store time of the message (RocketMQ reads it from the commitlog)", False),
        ]
    ),
    cluster_by=("topic", "queue_id"),
    sort_by=("topic", "queue_id", "queue_offset"),
    description="Where each message of a queue is (RocketMQ's ConsumeQueue).",
    row_group_rows=16 * 1024,
    dictionary=("topic", "queue_id", "store_timestamp"),
    view_statistics=("topic", "queue_id", "queue_offset", "commitlog_offset", "tags_code", "store_timestamp"),
    delta_encoded=("queue_offset", "commitlog_offset"),
)

CONSUME_QUEUE_EXT = TableSpec(
    "consume_queue_ext",
    pa.schema(
        [
            _f("topic", pa.string(), "Topic", False),
            _f("queue_id", pa.int32(), "Queue of the topic", False),
            _f("queue_offset", pa.int64(), "Queue offset of the message this unit belongs to", False),
            _f(
                "ext_offset",
                pa.int64(),
                "Undecorated ext address of this unit (its index in the queue's ext log); "
                "the consume queue row's tags_code holds it decorated",
                False,
            ),
            _f(
                "commitlog_offset",
                pa.int64(),
                "physical_offset of the message (repeated from the consume queue row, so filtered reads need no join)",
                False,
            ),
            _f("size", pa.int32(), "Message size in bytes (repeated from the consume queue row)", False),
            _f("tags_code", pa.int64(), "Real tag hash code of the message", False),
            _f("store_timestamp", TIMESTAMP, "Store time of the message", False),
            _f(
                "filter_bitmap",
                pa.binary(),
                "Bloom bits of the SQL92 subscriptions the message matched (BitsArray "
                "layout, ceil(m/8) bytes); null when bitmaps were off",
            ),
            _f(
                "filter_version",
                pa.int64(),
                "Subscription registry version the bitmap was computed with: valid for "
                "subscriptions registered at or before it",
            ),
        ]
    ),
    cluster_by=("topic", "queue_id"),
    sort_by=("topic", "queue_id", "queue_offset"),
    description="Filter bitmap, store time and real tag code per message (RocketMQ's ConsumeQueueExt).",
    row_group_rows=16 * 1024,
    dictionary=("topic", "queue_id", "tags_code", "store_timestamp", "filter_bitmap", "filter_version"),
    view_statistics=(
        "topic",
        "queue_id",
        "queue_offset",
        "ext_offset",
        "commitlog_offset",
        "tags_code",
        "store_timestamp",
    ),
    delta_encoded=("queue_offset", "ext_offset", "commitlog_offset"),
)

EXT_SUMMARY = TableSpec(
    "consume_queue_ext_summary",
    pa.schema(
        [
            _f("path", pa.string(), "Data file of consume_queue_ext this row sums up (Delta add path)", False),
            _f("topic", pa.string(), "Topic of the file's rows", False),
            _f("queue_id", pa.int32(), "Queue of the file's rows", False),
            _f("num_records", pa.int64(), "Rows in the file", False),
            _f("filter_bitmap_or", pa.binary(), "OR of every row's filter bitmap; null when some row has none"),
            _f("filter_version_min", pa.int64(), "Lowest filter_version of the file's rows"),
            _f(
                "tags_codes",
                pa.list_(pa.int64()),
                "Distinct real tag codes of the file's rows; null when there are more than 64",
            ),
            _f(
                "no_hit",
                pa.list_(pa.string()),
                "SQL92 subscriptions ('group@version') whose Bloom bits no row's "
                "bitmap hits: the file holds no message for them",
            ),
        ]
    ),
    cluster_by=("topic",),
    description=(
        "One row per consume_queue_ext file: what its bitmaps and tag codes can match, so a selective "
        "read skips files without opening them."
    ),
    remote_look_s=CONFIG_LOOK_S,
)

SUBSCRIPTION = TableSpec(
    "subscription",
    pa.schema(
        [
            _f("consumer_group", pa.string(), "Consumer group", False),
            _f("topic", pa.string(), "Subscribed topic", False),
            _f("expression_type", pa.string(), "TAG, SQL92 or CLASS", False),
            _f(
                "expression",
                pa.string(),
                "Tag expression ('TagA || TagB', '*') or SQL92 text; for CLASS, the tag "
                "expression that prunes before the class runs",
                False,
            ),
            _f("version", pa.int64(), "Registry version (Delta version of the commit that registered this row)", False),
            _f("sub_version", pa.int64(), "Client's subscription version (epoch ms of the registration)", False),
            _f(
                "born_timestamp", TIMESTAMP, "When the subscription was registered (ConsumerFilterData.bornTime)", False
            ),
            _f(
                "dead", pa.bool_(), "An unregistration: the (group, topic) has no subscription from this version", False
            ),
            _f("bloom_bit_pos", pa.list_(pa.int32()), "Bloom bit positions of 'group#topic' (BloomFilterData.bitPos)"),
            _f("bloom_bit_num", pa.int32(), "Bloom filter size m the bit positions are for (BloomFilterData.bitNum)"),
            _f(
                "filter_class",
                pa.string(),
                "CLASS: import path 'module:Class' of the filter class (SubscriptionData.subString)",
            ),
            _f("filter_class_crc", pa.int64(), "CLASS: CRC32 & 0x7FFFFFFF of the class's module source as registered"),
            _f(
                "filter_class_source",
                pa.string(),
                "CLASS: uploaded module source (filterClassSource), run instead of an "
                "import; only with enable_filter_class_source",
            ),
        ]
    ),
    cluster_by=("topic",),
    description="Subscriptions by (consumer group, topic), every registration kept (RocketMQ's ConsumerFilterManager).",
    remote_look_s=CONFIG_LOOK_S,
)

INDEX = TableSpec(
    "index",
    pa.schema(
        [
            _f("hash_range", pa.int32(), "Cluster of key hashes this row is filed under (key_hash >> bits)", False),
            _f(
                "key_hash",
                pa.int32(),
                "abs(String.hashCode) of 'topic#key' (IndexService.buildKey), as IndexFile's keyHash",
                False,
            ),
            _f("commitlog_offset", pa.int64(), "physical_offset of the message (IndexFile's phyOffset)", False),
            _f("store_timestamp", TIMESTAMP, "Store time of the message (IndexFile keeps it as timeDiff)", False),
        ]
    ),
    cluster_by=("hash_range",),
    sort_by=("key_hash",),  # key_hash order is hash_range order too
    dictionary=("hash_range", "store_timestamp"),
    description=(
        "Message keys and unique keys to commitlog offsets (RocketMQ's IndexFile entries: the key itself "
        "is not stored; lookups check it on the message, so colliding hashes never mix keys)."
    ),
)

TOPIC_CONFIG = TableSpec(
    "topic_config",
    pa.schema(
        [
            _f("topic", pa.string(), "Topic name", False),
            _f("read_queue_nums", pa.int32(), "Queues consumers read (readQueueNums)", False),
            _f("write_queue_nums", pa.int32(), "Queues producers write (writeQueueNums)", False),
            _f("perm", pa.int32(), "PermName bits: 4 read, 2 write, 1 inherit", False),
            _f("topic_filter_type", pa.string(), "SINGLE_TAG or MULTI_TAG", False),
            _f("order", pa.bool_(), "Ordered topic", False),
            _f("updated_at", TIMESTAMP, "When this configuration was last written", False),
            _f(
                "cluster_by",
                pa.list_(pa.string()),
                "Clustering keys of the topic's settled commitlog data: TAGS and/or property names (null: TAGS)",
            ),
            _f(
                "retention_ms",
                pa.int64(),
                "How long the topic's messages are kept after their store time, in "
                "milliseconds (null: only the store's file_reserved_time applies)",
            ),
        ]
    ),
    description="Topic configuration (RocketMQ's TopicConfigManager).",
    brief_tombstones=False,  # put and delete are deltalake's overwrite and delete, which do not stamp what they remove,
    remote_look_s=CONFIG_LOOK_S,
)

SUBSCRIPTION_GROUP = TableSpec(
    "subscription_group",
    pa.schema(
        [
            _f("group_name", pa.string(), "Consumer group", False),
            _f("consume_enable", pa.bool_(), "Whether the group may pull (consumeEnable)", False),
            _f("consume_from_min_enable", pa.bool_(), "consumeFromMinEnable", False),
            _f("consume_broadcast_enable", pa.bool_(), "consumeBroadcastEnable", False),
            _f(
                "retry_queue_nums",
                pa.int32(),
                "Queues of the group's %RETRY% topic (retryQueueNums); 0 drops sent-back messages",
                False,
            ),
            _f("retry_max_times", pa.int32(), "Redeliveries before a message goes to %DLQ% (retryMaxTimes)", False),
            _f("broker_id", pa.int64(), "brokerId", False),
            _f("which_broker_when_consume_slowly", pa.int64(), "whichBrokerWhenConsumeSlowly", False),
            _f("updated_at", TIMESTAMP, "When this configuration was last written", False),
            _f("consume_message_orderly", pa.bool_(), "consumeMessageOrderly: a FIFO group (null: false)"),
        ]
    ),
    description="Consumer group configuration (RocketMQ's SubscriptionGroupManager).",
    remote_look_s=CONFIG_LOOK_S,
)

CONSUMER_OFFSET = TableSpec(
    "consumer_offset",
    pa.schema(
        [
            _f("consumer_group", pa.string(), "Consumer group", False),
            _f("topic", pa.string(), "Topic", False),
            _f("queue_id", pa.int32(), "Queue of the topic", False),
            _f("offset", pa.int64(), "Committed consumer offset: the next queue offset the group will consume", False),
            _f("commit_version", pa.int64(), "Delta version of the commit that wrote the row: the latest wins", False),
            _f("commit_timestamp", TIMESTAMP, "When the offset was committed", False),
        ]
    ),
    cluster_by=("consumer_group",),
    sort_by=("consumer_group", "topic", "queue_id"),
    description="Consumer offsets by (group, topic, queue) (RocketMQ's ConsumerOffsetManager).",
)

TRANSACTION_CHECKER = TableSpec(
    "transaction_checker",
    pa.schema(
        [
            _f("producer_group", pa.string(), "Producer group whose half messages the checker answers for", False),
            _f("checker", pa.string(), "Import path of the checker, 'package.module:function'", False),
            _f("updated_at", TIMESTAMP, "When the checker was registered: the latest registration wins", False),
        ]
    ),
    description="Transaction check-back callables by producer group (RocketMQ asks a producer of the group).",
    remote_look_s=CONFIG_LOOK_S,
)

COMMITLOG_EXPIRED = TableSpec(
    "commitlog_expired",
    pa.schema(
        [
            _f(
                "start_offset",
                pa.int64(),
                "physical_offset of the first message of a run of adjacent messages that per-topic retention removed",
                False,
            ),
            _f("end_offset", pa.int64(), "One past the run's last byte: where the next message starts", False),
            _f("messages", pa.int32(), "Messages in the run", False),
            _f(
                "removed_at",
                TIMESTAMP,
                "When the run was recorded (just before the commitlog commit removing it)",
                False,
            ),
        ]
    ),
    sort_by=("start_offset",),
    description=(
        "Commitlog offset runs removed by per-topic retention from files kept for other topics' "
        "messages: the integrity checks count them as present, so the offsets stay contiguous."
    ),
)

POP_LOG = TableSpec(
    "pop_log",
    pa.schema(
        [
            _f("kind", pa.int8(), "0 checkpoint (a message received), 1 ack, 2 sent to the DLQ, 3 pop offset", False),
            _f("consumer_group", pa.string(), "Consumer group that received the message", False),
            _f("topic", pa.string(), "Topic", False),
            _f("queue_id", pa.int32(), "Queue of the topic", False),
            _f(
                "queue_offset", pa.int64(), "The message's queue offset; for kind 3, the queue's next pop offset", False
            ),
            _f("commitlog_offset", pa.int64(), "The message's commitlog offset (-1 for kind 3)", False),
            _f("attempt", pa.int32(), "Delivery attempt of the checkpoint (1 the first time; 0 for kind 3)", False),
            _f("pop_time", pa.int64(), "Epoch ms of the receive the row names (its receipt handle's)", False),
            _f("invisible_until", pa.int64(), "Epoch ms when an unacked checkpoint's message is received again", False),
        ]
    ),
    cluster_by=("consumer_group",),
    sort_by=("consumer_group", "topic", "queue_id", "queue_offset"),
    description=(
        "Pop consumption (RocketMQ 5's receive, ack and invisibility): checkpoints, acks and pop offsets, "
        "as RocketMQ's revive log holds them; rows merge in any order (storelib.storage.pop_log)."
    ),
)

TABLES: dict[str, TableSpec] = {
    t.name: t
    for t in (
        COMMITLOG,
        COMMITLOG_SUMMARY,
        CONSUME_QUEUE,
        CONSUME_QUEUE_EXT,
        EXT_SUMMARY,
        INDEX,
        TOPIC_CONFIG,
        SUBSCRIPTION,
        SUBSCRIPTION_GROUP,
        CONSUMER_OFFSET,
        TRANSACTION_CHECKER,
        COMMITLOG_EXPIRED,
        POP_LOG,
    )
}


def describe() -> str:
    """Every table and column with its description, as plain text."""
    lines = []
    for spec in TABLES.values():
        lines.append(f"{spec.name}: {spec.description}")
        for f in spec.arrow:
            lines.append(f"  {f.name:<28} {str(f.type):<32} {f.metadata[b'comment'].decode()}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
