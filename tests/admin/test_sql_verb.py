"""``storelib sql FILE name=value ...``: a call's mistakes refused before Spark starts, the rows as a table or JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from storelib import Message, MessageStore
from storelib.admin import main


@pytest.fixture
def no_java(python_env, tmp_path) -> dict:
    """An environment without Java: a command that started Spark would fail, so one that answers did not."""
    root = str(tmp_path / "store")
    MessageStore.create(root).close()
    env = {**python_env, "JAVA_HOME": "/nonexistent", "PATH": "/usr/sbin:/sbin", "STORELIB_STORE": root}
    env.pop("SPARK_HOME", None)
    return env


@pytest.mark.parametrize(
    "argv, says",
    [
        (["messages_by_key", "topic=Orders"], "key: messages_by_key.sql needs :key (string)"),
        (["messages_by_key", "topic=Orders", "key=k", "colour=red"], "not ['colour']"),
        (["message_by_id", "msg_id"], "params: are name=value"),
        (["messages_by_time", "topic=T", "begin=yesterday", "end=0"], "begin: must be a timestamp"),
        (["no_such_file"], "FILE: no SQL file 'no_such_file', neither a path nor in sql/ (consume_queue_depth"),
        (["message_by_id", "msg_id=1", "--store", "/nonexistent/store"], "no store at /nonexistent/store"),
    ],
)
def test_a_bad_call_is_refused_before_spark_starts(no_java, argv, says):
    def refused(command: list[str]) -> tuple[list[str], subprocess.CompletedProcess]:
        moved = command == ["storelib.sql"] and "--store" in argv  # its --store comes first
        args = ["--store", "/nonexistent/store"] + argv[:-2] if moved else argv
        run = [sys.executable, "-m", *command, *args]
        return command, subprocess.run(run, env=no_java, capture_output=True, text=True, timeout=60)

    with ThreadPoolExecutor(2) as pool:  # python -m storelib.sql: the same checks; both at once
        for command, done in pool.map(refused, (["storelib", "sql"], ["storelib.sql"])):
            assert done.returncode == 2 and says in done.stderr, (command, done.stderr)
            assert len(done.stderr.splitlines()) == 1 and "Java" not in done.stderr, done.stderr


def test_rows_as_a_table_and_as_json(store, capsys):
    sent = store.send_batch([Message("TopicTest", keys=["order-7"], body=b"x", queue_id=q) for q in (0, 1)])
    store.dispatch()
    assert main(["sql", "messages_by_key", "topic=TopicTest", "key=order-7", "--store", store.root, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["msg_id"] for r in rows) == sorted(r.msg_id for r in sent)
    stored = {m.msg_id: m for m in store.query_by_key("TopicTest", "order-7")}
    assert all(r["store_timestamp"] == int(stored[r["msg_id"]].store_timestamp.timestamp() * 1000) for r in rows)
    assert main(["sql", "consume_queue_depth", "--limit", "1", "--store", store.root]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["topic", "queue_id", "messages", "min_offset", "max_offset"]
    assert out[2].split() == ["TopicTest", "0", "1", "0", "1"] and out[-1] == "the first 1 rows shown (--limit)"
    assert main(["sql", "messages_by_key", "topic=TopicTest", "key=nobody", "--store", store.root]) == 1
    assert capsys.readouterr().err == "not found: messages_by_key.sql returned no rows\n"
