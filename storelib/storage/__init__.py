"""RocketMQ's store files as Delta tables: the CommitLog, the ConsumeQueue and its ext, the IndexFile
entries, and the small config tables (topics, groups, consumer offsets). Each module owns its rows,
its markers and its point look-ups; ``schema`` defines every table's columns in one place."""
