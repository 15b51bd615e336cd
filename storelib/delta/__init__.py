"""The Delta layer: table specs, snapshot views and file pruning on statistics, the Parquet sink that
writes files from anywhere (driver or executors), commits with ``txn`` markers, and compaction.
deltalake is the only committer; Spark and pyarrow read."""

from storelib.delta import teardown as _teardown  # noqa: F401,E402  (registers the wait at exit on import)
