"""Consuming: ``getMessage`` and the pull processor with RocketMQ's statuses, long polling,
subscribing, retry and dead letters, and consumer lag."""
