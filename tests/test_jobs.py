"""The jobs and SQL files, run as users run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storelib.model.errors import JavaNotFoundError
from storelib.session import check_java, read_properties_file

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_job(tmp_path, python_env):
    out = subprocess.run([sys.executable, str(ROOT / "jobs" / "quickstart.py"), "--store", str(tmp_path / "qs"),
                          "--messages", "400"], env=python_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "sent: 40 messages one by one (send_batch), 360 as a DataFrame (send_dataframe)" in text
    assert "OrderEvents" in text and "PaymentEvents" in text and "AuditLog" in text
    assert "messages with key 'order-200': AuditLog @ commitlog offset" in text  # 200 % 3 topics -> the third
    assert "UNIQ_KEY" in text


def test_missing_java_is_a_clear_message(tmp_path, python_env):
    env = {**python_env, "PATH": str(tmp_path), "JAVA_HOME": ""}
    env.pop("JAVA_HOME")
    out = subprocess.run([sys.executable, str(ROOT / "jobs" / "dispatch.py"), "--store", str(tmp_path / "s")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Spark needs Java 17 or newer" in out.stderr
    assert "Traceback" not in out.stderr


def test_check_java_names_a_bad_java_home(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="has no bin/java"):
        check_java()


def test_spark_defaults_file_has_what_the_store_needs():
    conf = read_properties_file(ROOT / "spark-defaults.conf")
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    assert conf["spark.driver.maxResultSize"]


def test_sql_queue_depth_equals_python_answer(spark, store):
    from storelib import Message

    store.send_batch([Message("TopicTest", body=b"x", queue_id=i % 3) for i in range(7)])
    store.dispatch()
    store.table("consume_queue").createOrReplaceTempView("consume_queue")
    rows = spark.sql((ROOT / "sql" / "consume_queue_depth.sql").read_text()).collect()
    assert [(r.queue_id, r.messages, r.min_offset, r.max_offset) for r in rows] == [
        (q, n, 0, store.max_queue_offset("TopicTest", q)) for q, n in ((0, 3), (1, 2), (2, 2))]


def test_readme_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = subprocess.run(["bash", "-c", "awk '/<!-- test-command -->/{getline; getline; print; exit}' README.md"],
                        cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert ci.endswith("-m pytest") and ci in readme
    assert "awk '/<!-- test-command -->/" in (ROOT / ".ci" / "run").read_text()
