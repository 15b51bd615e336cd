"""Shared fixtures: a fresh store on disk per test (the Spark session is the root conftest's)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

@pytest.fixture
def ansi(spark):
    """The session with ANSI mode on (Spark 4's default), restored afterwards."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    yield spark
    spark.conf.set("spark.sql.ansi.enabled", before)


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(spark, store_path):
    from storelib import MessageStore

    s = MessageStore.create(store_path, spark)
    s.create_topic("TopicTest", queues=4)
    yield s
    s.close()  # its producers, and the machine's committer role with them (storelib.send.relay)


@pytest.fixture
def python_env() -> dict:
    """Environment for subprocesses that run jobs with this interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("STORELIB_SPARK_LOG_LEVEL", "ERROR")
    return env
