"""Message filtering: tag subscriptions, SQL92 subscriptions and RocketMQ's Bloom filter bitmaps."""
