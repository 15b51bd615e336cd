"""Sessions that just work: a store must exist to be opened, jobs refuse a mistyped path, and a session made
elsewhere (plain ``SparkSession.builder``) gets what the store needs or a clear error."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storelib import MessageStore
from storelib.model.errors import StoreNotFoundError

ROOT = Path(__file__).resolve().parents[1]


def test_open_refuses_a_path_without_a_store(spark, tmp_path):
    with pytest.raises(StoreNotFoundError) as e:
        MessageStore.open(str(tmp_path / "typo"), spark)
    assert e.value.field == "root" and "MessageStore.create" in str(e.value)
    assert not (tmp_path / "typo").exists()
    made = MessageStore.create(str(tmp_path / "made"), spark)
    assert MessageStore.open(made.root, spark).root == made.root
    assert MessageStore.open(str(tmp_path / "other"), spark, create=True).context.tables.exists()


@pytest.mark.slow
@pytest.mark.parametrize("job", ["dispatch.py", "deliver_delayed.py", "check_transactions.py"])
def test_jobs_refuse_a_mistyped_store_and_create_when_asked(tmp_path, python_env, job):
    missing = tmp_path / "typo"
    out = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / job), "--store", str(missing)],
        capture_output=True,
        text=True,
        env=python_env,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if "failed:" in line]
    assert len(errors) == 1 and "no store at" in errors[0]
    # no traceback of the job's own (PySpark's worker daemon may still log a BrokenPipeError at teardown)
    assert not re.search(r'File ".*(storelib|jobs)/', out.stderr), out.stderr[-2000:]
    assert not missing.exists()
    made = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / job), "--store", str(missing), "--create"],
        capture_output=True,
        text=True,
        env=python_env,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    assert (missing / "commitlog" / "_delta_log").is_dir()


FOREIGN = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from storelib import Message, MessageStore, StoreError
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    try:
        store = MessageStore.create(sys.argv[1], spark)
    except StoreError as e:
        print(type(e).__name__, e)
        sys.exit(2)
    store.create_topic("T", queues=2)
    store.send_batch([Message("T", tags=f"Tag{i % 2}", keys=[f"k{i}"]) for i in range(10)])
    store.dispatch()                                   # a Spark job with Python on the executors
    assert store.read("T", "Tag1").count() == 5
    df = spark.read.format("rocketmq").option("store", store.root).load()
    assert df.where("topic = 'T' AND keys = 'k3'").count() == 1
    from storelib.sql import register_views
    try:
        register_views(spark, store, delta=True)      # this session has no Delta Spark jar
        raise AssertionError("no error")
    except StoreError as e:
        assert type(e).__name__ == "SessionError" and "io.delta:delta-spark" in str(e), e
    from storelib.session import end_python_daemons
    ended = end_python_daemons()                       # what runs at exit, run here to see it work
    assert ended >= 1 and end_python_daemons() == 0, ended
    print("OK")
""")


@pytest.mark.slow
def test_a_plain_session_from_a_venv_works(tmp_path, python_env):
    """``SparkSession.builder.getOrCreate()`` with no PYSPARK_PYTHON: Spark would start ``python3`` from PATH,
    which lacks the project's packages (sqlglot); the store points the workers at this interpreter."""
    assert subprocess.run(
        ["python3", "-c", "import sqlglot"], capture_output=True, env={"PATH": "/usr/bin:/bin"}
    ).returncode
    env = {k: v for k, v in python_env.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = "/usr/bin:/bin"  # python3 there has no sqlglot
    script = tmp_path / "foreign.py"
    script.write_text(FOREIGN)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout[-1000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]  # no Python worker's at exit (issue 50, item 5)


@pytest.mark.slow
def test_workers_that_cannot_import_storelib_are_named(tmp_path, python_env):
    """PYSPARK_PYTHON names an interpreter without the project's packages: one clear error, not a worker traceback."""
    script = tmp_path / "foreign.py"
    script.write_text(FOREIGN)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env={**python_env, "PYSPARK_PYTHON": "/usr/bin/python3"},
        timeout=600,
    )
    assert out.returncode == 2, out.stdout[-1000:] + out.stderr[-3000:]
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("SessionError spark.pyspark.python: Spark's Python workers cannot import storelib")
    assert "No module named" in line
