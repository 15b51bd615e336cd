"""Keeping the store: retention (CleanCommitLogService, CleanConsumeQueueService), compaction and vacuum."""
