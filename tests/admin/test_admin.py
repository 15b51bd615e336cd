"""The ``storelib`` command: every verb in-process, and the point look-ups as a subprocess without Java."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from chispa import assert_df_equality

from storelib import Message, MessageStore
from storelib.admin import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys, *argv: str):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def filled(store):
    """TopicTest with 20 messages over 4 queues (keys k0..k19, tags by parity, property n), dispatched."""
    results = store.send_batch(
        [
            Message(
                "TopicTest",
                body=f"m{i}".encode(),
                tags="TagA" if i % 2 else "TagB",
                keys=[f"k{i}"],
                properties={"n": str(i)},
                queue_id=i % 4,
            )
            for i in range(20)
        ]
    )
    store.dispatch()
    return store, results


def test_topic_verbs(store, capsys):
    root = store.root
    code, out, _ = run(
        capsys, "topic", "create", "Orders", "--queues", "8", "--cluster-by", "TAGS", "region", "--store", root
    )
    assert code == 0 and out == "created topic Orders: 8 read / 8 write queues, perm RW-, clustered by TAGS,region\n"
    assert store.topic_config("Orders").cluster_by == ("TAGS", "region")
    code, out, _ = run(capsys, "topic", "update", "Orders", "--perm", "4", "--store", root)
    assert code == 0 and "perm R--" in out and "clustered by TAGS,region" in out  # kept on update
    code, _, err = run(capsys, "topic", "update", "Nope", "--store", root)
    assert code == 2 and err.count("\n") == 1 and "topic Nope does not exist" in err
    listed = run_json(capsys, "topic", "list", "--store", root)
    assert [t["topic"] for t in listed] == ["Orders", "TopicTest"] and listed[0]["perm"] == "R--"
    store.subscribe("GroupA", "TopicTest", "*")  # makes %RETRY%GroupA
    assert "%RETRY%GroupA" in [t["topic"] for t in run_json(capsys, "topic", "list", "--system", "--store", root)]
    code, out, _ = run(capsys, "topic", "delete", "Orders", "--store", root)
    assert code == 0 and "deleted topic Orders" in out and "Orders" not in store.context.topics.all()
    code, _, err = run(capsys, "topic", "delete", "SCHEDULE_TOPIC_XXXX", "--store", root)
    assert code == 2 and "system topic" in err


def test_topic_status_and_group_verbs(filled, capsys):
    store, results = filled
    status = run_json(capsys, "topic", "status", "TopicTest", "--store", store.root)
    assert [(s["queue_id"], s["min_offset"], s["max_offset"]) for s in status] == [(q, 0, 5) for q in range(4)]
    assert all(s["last_store_time"] for s in status)
    code, out, _ = run(capsys, "group", "create", "GroupR", "--retry-max-times", "3", "--store", store.root)
    assert code == 0 and "retry up to 3 times" in out
    groups = run_json(capsys, "group", "list", "--store", store.root)
    assert {
        "group": "GroupR",
        "consume_enable": True,
        "consume_broadcast_enable": True,
        "retry_queue_nums": 1,
        "retry_max_times": 3,
    } in groups


def test_send_a_test_message_and_a_file(store, tmp_path, capsys):
    root = store.root
    sent = run_json(
        capsys,
        "send",
        "TopicTest",
        "--tags",
        "TagA",
        "--keys",
        "a",
        "b",
        "--property",
        "region=eu",
        "--queue-id",
        "2",
        "--store",
        root,
    )
    assert [(s["send_status"], s["queue_id"], s["queue_offset"]) for s in sent] == [("SEND_OK", 2, 0)]
    m = store.query_by_id(sent[0]["msg_id"])
    assert (m.tags, m.keys, m.properties["region"], m.body) == ("TagA", "a b", "eu", b"Hello storelib")

    lines = tmp_path / "m.jsonl"
    lines.write_text(
        '{"body": "one", "tags": "TagB", "keys": ["x"]}\n\n'
        '{"topic": "TopicTest", "body_base64": "AAEC", "properties": {"p": "1"}, "queue_id": 1}\n'
    )
    code, out, _ = run(capsys, "send", "TopicTest", "--file", str(lines), "--store", root)
    assert code == 0 and out.count("SEND_OK") == 2
    assert store.query_by_id(_ids(out)[1]).body == b"\x00\x01\x02"

    before = store.max_offset()
    bad = tmp_path / "bad.jsonl"
    for text, says in [
        ('{"body": "ok"}\n{"body": "b", "colour": 1}\n', "colour: is not a message field"),
        ('{"body": "ok"}\nnot json\n', "file: is not JSON"),
        ('{"body": "ok"}\n\n{"body": "x", "queue_id": 99}\n', "queue_id"),
        ('{"body": 5}\n', "body: must be a string"),
    ]:
        bad.write_text(text)
        code, out, err = run(capsys, "send", "TopicTest", "--file", str(bad), "--store", root)
        assert code == 2 and says in err and err.count("\n") == 1 and out == "", err
        assert f"bad.jsonl line {len(text.splitlines())}" in err, err
    assert store.max_offset() == before  # nothing of a refused file was sent

    code, out, _ = run(capsys, "send", "TopicTest", "--count", "25", "--store", root)
    assert code == 0 and out.startswith("sent 25 messages (SEND_OK) in one commit")


def test_send_reads_standard_input_for_file_dash(store, capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO('{"body": "in-1"}\n{"body": "in-2", "tags": "TagA"}\n'))
    code, out, err = run(capsys, "send", "TopicTest", "--file", "-", "--store", store.root)
    assert code == 0 and out.count("SEND_OK") == 2, err
    assert [store.query_by_id(i).body for i in _ids(out)] == [b"in-1", b"in-2"]
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"body": "ok"}\nnot json\n'))
    code, out, err = run(capsys, "send", "TopicTest", "--file", "-", "--store", store.root)
    assert code == 2 and "stdin line 2" in err and "file: is not JSON" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    code, out, err = run(capsys, "send", "TopicTest", "--file", "-", "--store", store.root)
    assert code == 2 and "file: holds no message" in err and "[at stdin]" in err and out == "", err


def test_version_says_which_storelib(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"storelib {version('storelib')}"


def _ids(table: str) -> list[str]:
    return re.findall(r"\b[0-9A-F]{32}\b", table)[::2]  # msg_id, then uniq_key, per row


def test_query_verbs_find_and_say_not_found(filled, capsys):
    store, results = filled
    r = results[7]
    rec = run_json(capsys, "query", "id", r.msg_id, "--store", store.root)
    assert (rec["OffsetID"], rec["Topic"], rec["Tags"], rec["Keys"], rec["Body"]) == (
        r.msg_id,
        "TopicTest",
        "TagA",
        "k7",
        "m7",
    )
    code, out, _ = run(capsys, "query", "id", r.msg_id, "--store", store.root)
    assert code == 0 and f"Unique Key:        {r.uniq_key}" in out and "Queue Offset:      1" in out
    assert (
        run_json(capsys, "query", "unique-key", "TopicTest", r.uniq_key, "--store", store.root)["OffsetID"] == r.msg_id
    )
    by_key = run_json(capsys, "query", "key", "TopicTest", "k7", "--store", store.root)
    assert [m["OffsetID"] for m in by_key] == [r.msg_id]
    at = run_json(capsys, "query", "offset", "TopicTest", str(r.queue_id), str(r.queue_offset), "--store", store.root)
    assert at["OffsetID"] == r.msg_id

    for argv, says in [
        (["query", "key", "TopicTest", "nope"], "no message of topic TopicTest has key 'nope'"),
        (["query", "offset", "TopicTest", "1", "99"], "OFFSET_OVERFLOW_BADLY"),
        (["query", "unique-key", "TopicTest", "0" * 32], "not found"),
        (["query", "id", store.query_by_id(r.msg_id).msg_id[:-4] + "FFFF"], "not found"),
    ]:
        code, out, err = run(capsys, *argv, "--store", store.root)
        assert (code, out) == (1, "") and err.startswith("not found: ") and says in err, err
    code, _, err = run(capsys, "query", "id", "ZZZ", "--store", store.root)
    assert code == 2 and "msg_id: length is 3" in err


def test_pull_commit_and_consumer_progress(filled, spark, capsys):
    store, _ = filled
    store.subscribe("GroupA", "TopicTest", "TagA")
    first = run_json(capsys, "pull", "GroupA", "TopicTest", "1", "--max", "2", "--commit", "--store", store.root)
    assert first["status"] == "FOUND" and [m["Tags"] for m in first["messages"]] == ["TagA", "TagA"]
    assert store.committed_offset("GroupA", "TopicTest", 1) == first["next_begin_offset"]
    code, out, _ = run(capsys, "pull", "GroupA", "TopicTest", "1", "--sql", "n > 100", "--store", store.root)
    assert code == 0 and out.startswith(("status=NO_MATCHED_MSG", "status=NO_NEW_MSG")), out
    code, out, _ = run(capsys, "pull", "GroupA", "TopicTest", "1", "99", "--store", store.root)
    assert code == 0 and out.startswith("status=OFFSET_ILLEGAL")

    lag = run_json(capsys, "consumer", "progress", "GroupA", "--store", store.root)
    got = spark.createDataFrame(
        [tuple(r.values()) for r in lag], "topic string, queue_id int, max_offset long, committed_offset long, lag long"
    )
    assert_df_equality(got, store.consumer_lag("GroupA"))
    code, out, _ = run(capsys, "consumer", "progress", "GroupA", "--store", store.root)
    assert out.rstrip().endswith(f"total lag: {sum(r['lag'] for r in lag)}")
    per_group = run_json(capsys, "consumer", "lag", "--store", store.root)
    assert {
        "group": "GroupA",
        "topic": "TopicTest",
        "queues": 4,
        "max_offset_sum": 20,
        "committed_sum": first["next_begin_offset"],
        "lag": 20 - first["next_begin_offset"],
    } in per_group
    code, _, err = run(capsys, "consumer", "progress", "GroupNobody", "--store", store.root)
    assert code == 1 and "GroupNobody reads no queue" in err


def test_subscriptions_with_filter_statistics(filled, capsys):
    store, _ = filled
    code, out, _ = run(capsys, "subscribe", "GroupS", "TopicTest", "--sql", "n >= 10", "--store", store.root)
    assert code == 0 and out.startswith("subscribed GroupS to TopicTest: SQL92 n >= 10")
    code, _, err = run(capsys, "subscribe", "GroupS", "TopicTest", "--sql", "n >=", "--store", store.root)
    assert code == 2 and "n >=" in err and err.count("\n") == 1
    store.dispatch()
    subs = run_json(capsys, "subscriptions", "--group", "GroupS", "--stats", "--store", store.root)
    assert [(s["topic"], s["type"], s["expression"], s["checked"], s["matched"], s["spark_sql"]) for s in subs] == [
        ("TopicTest", "SQL92", "n >= 10", 20, 10, "n >= 10")
    ]
    code, _, err = run(capsys, "unsubscribe", "GroupS", "TopicTest", "--store", store.root)
    assert code == 0
    code, _, err = run(capsys, "unsubscribe", "GroupS", "TopicTest", "--store", store.root)
    assert code == 1 and "has no subscription" in err
    code, _, err = run(capsys, "subscriptions", "--group", "GroupS", "--store", store.root)
    assert code == 1 and "no subscriptions of group GroupS" in err


def test_upkeep_verbs(filled, capsys):
    store, results = filled
    code, out, _ = run(capsys, "dispatch", "--store", store.root)
    assert (code, out) == (0, f"nothing new: the store is dispatched up to commitlog offset {store.max_offset()}\n")
    inspected = run_json(capsys, "inspect", "--store", store.root)
    tables = {t["table"]: t for t in inspected["tables"]}
    assert tables["commitlog"]["rows"] == 20 and tables["consume_queue"]["rows"] == 20
    assert inspected["dispatch_progress"]["consume_queue"] == inspected["max_offset"] == store.max_offset()
    code, out, _ = run(capsys, "verify", "--full", "--store", store.root)
    assert (code, out) == (0, "the store is sound (every commitlog offset read)\n")
    code, out, _ = run(capsys, "retention", "--store", store.root)
    assert code == 0 and out.startswith("nothing expired")
    code, out, _ = run(capsys, "compact", "--settle-ms", "0", "--store", store.root)
    assert code == 0 and out.startswith(("compacted: ", "nothing to compact")), out
    code, out, _ = run(capsys, "vacuum", "--store", store.root)
    assert code == 0
    assert store.query_by_id(results[3].msg_id).body == b"m3"  # everything still found after upkeep
    code, out, _ = run(capsys, "deliver", "--store", store.root)
    assert (code, out) == (0, "nothing new: no delayed or timer message is due\n")
    code, out, _ = run(capsys, "check-transactions", "--store", store.root)
    assert (code, out) == (0, "nothing new: no half message is waiting for a check-back\n")


def test_topic_retention_through_the_command(filled, capsys):
    store, results = filled
    code, out, _ = run(
        capsys, "topic", "create", "Short", "--queues", "2", "--retention-ms", "60000", "--store", store.root
    )
    assert code == 0 and out.rstrip().endswith("messages kept 60000 ms")
    code, out, _ = run(capsys, "topic", "update", "Short", "--perm", "6", "--store", store.root)
    assert "messages kept 60000 ms" in out  # kept on update
    short = store.send_batch([Message("Short", keys=[f"s{i}"]) for i in range(6)])
    store.dispatch()
    now = int(max(m.store_timestamp for m in [store.query_by_id(r.msg_id) for r in short]).timestamp() * 1000)
    code, out, _ = run(capsys, "retention", "--now", str(now + 1000), "--store", store.root)
    assert (code, out) == (0, f"nothing expired: the store starts at commitlog offset {store.min_offset()}\n")
    code, out, _ = run(capsys, "retention", "--now", str(now + 61_000), "--store", store.root)
    assert code == 0 and "6 messages of Short removed" in out, out
    code, _, err = run(capsys, "query", "key", "Short", "s3", "--store", store.root)
    assert code == 1 and "not found" in err
    status = run_json(capsys, "topic", "status", "Short", "--store", store.root)
    assert [(s["min_offset"], s["max_offset"]) for s in status] == [(3, 3), (3, 3)]
    assert store.query_by_id(results[0].msg_id).body == b"m0"  # TopicTest keeps everything
    listed = {t["topic"]: t for t in run_json(capsys, "topic", "list", "--store", store.root)}
    assert (listed["Short"]["retention_ms"], listed["TopicTest"]["retention_ms"]) == (60000, None)
    code, out, _ = run(capsys, "topic", "update", "Short", "--retention-ms", "0", "--store", store.root)
    assert code == 0 and "kept" not in out and store.topic_config("Short").retention_ms is None


def test_a_damaged_store_is_reported_by_verify(filled, capsys):
    store, _ = filled
    log = Path(store.root) / "consume_queue" / "_delta_log"
    for f in log.glob("*.json"):
        f.unlink()
    (Path(store.root) / "index" / "_delta_log" / "00000000000000000000.json").unlink()
    problems = MessageStore.verify(store.root)
    code, out, err = run(capsys, "verify", "--store", store.root)
    assert code == 2 and "is damaged" in err and "consume_queue" in err and err.count("\n") == 1
    assert len(problems) >= 2 and out.splitlines() == [f"problem: {p}" for p in problems]  # every one, uncut
    code, out, err = run(capsys, "verify", "--store", store.root, "--json")
    assert code == 2 and json.loads(out) == [{"problem": p} for p in problems] and err.count("\n") == 1
    code, out, err = run(capsys, "topic", "list", "--store", store.root)
    assert code == 2 and "is damaged" in err


def test_bad_invocations_are_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "topic", "list", "--store", str(tmp_path / "typo"))
    assert code == 2 and err.count("\n") == 1 and "no store at" in err and not (tmp_path / "typo").exists()
    with pytest.raises(SystemExit) as e:
        main(["pull", "G", "T", "-1", "--store", "x"])
    assert e.value.code == 2 and "must be an integer >= 0, got '-1'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["bogus"])
    assert e.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err


def test_every_verb_explains_its_options_with_defaults(capsys):
    from storelib.admin.command import build_parser

    parser = build_parser()
    leaves = []

    def walk(p, path):
        subs = [a for a in p._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            leaves.append((path, p))
        for a in subs:
            for name, child in a.choices.items():
                walk(child, path + [name])

    walk(parser, [])
    assert len(leaves) >= 24
    for path, p in leaves:
        text = p.format_help()
        for action in p._actions:
            if action.option_strings and action.default not in (None, False) and action.dest != "help":
                assert (
                    "(default:" in (action.help or "")
                    or "%(default)" in (action.help or "")
                    or f"(default: {action.default}" in text
                ), (path, action.dest)
            assert action.help, (path, action.dest)
        assert "``" not in text and ":class:" not in text, path  # no reST markup in a terminal


@pytest.mark.slow
def test_point_lookups_run_as_a_command_without_spark_or_java(filled, python_env):
    """``python -m storelib`` (and the installed ``storelib`` script): id, key, pull and progress answer
    with pyarrow alone. Java is taken away, so a verb that started Spark would fail."""
    store, results = filled
    store.subscribe("GroupP", "TopicTest", "*")
    env = {**python_env, "JAVA_HOME": "/nonexistent", "PATH": "/usr/sbin:/sbin", "STORELIB_STORE": store.root}
    env.pop("SPARK_HOME", None)
    script = Path(sys.executable).parent / "storelib"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "storelib"]
    r = results[5]
    python = [sys.executable, "-m", "storelib"]
    answered = [
        (["query", "id", r.msg_id], f"OffsetID:          {r.msg_id}"),
        (["query", "key", "TopicTest", "k5"], r.msg_id),
        (["pull", "GroupP", "TopicTest", str(r.queue_id), "0"], "status=FOUND"),
        (["consumer", "progress", "GroupP"], "total lag"),
        (["topic", "status", "TopicTest"], "last_store_time"),
        (["inspect"], "commitlog offsets [0, "),
    ]
    runs = [command + argv for argv, _ in answered] + [
        python + ["query", "key", "TopicTest", "nope"],
        python + ["dispatch"],
        python + ["topic", "list", "--store", os.devnull + "/x"],
    ]

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(2) as pool:  # two at a time: none of them writes (dispatch finds nothing new)
        outs = list(pool.map(run, runs))
    for (argv, says), out in zip(answered, outs):
        assert out.returncode == 0 and says in out.stdout, (argv, out.stdout, out.stderr[-2000:])
    missing, dispatched, no_store = outs[len(answered) :]
    assert (missing.returncode, missing.stdout) == (1, "") and missing.stderr.startswith("not found: ")
    assert dispatched.returncode == 0 and dispatched.stdout.startswith("nothing new"), dispatched.stderr[-2000:]
    assert no_store.returncode == 2 and "Traceback" not in no_store.stderr and len(no_store.stderr.splitlines()) == 1


def test_a_command_that_needs_no_spark_imports_no_pyspark_sqlglot_or_grpc(filled, python_env):
    """Commands that answer with pyarrow alone import only what they use: no PySpark (0.1 s at each start),
    no sqlglot (a tag subscription needs no SQL92) and no gRPC (only ``serve`` does)."""
    store, results = filled
    store.subscribe("GroupP", "TopicTest", "TagA || TagB")
    script = f"""
import sys
from storelib.admin import main
for argv in (["query", "key", "TopicTest", "k5"], ["pull", "GroupP", "TopicTest", "{results[5].queue_id}", "0"],
             ["topic", "list"], ["consumer", "progress", "GroupP"], ["dispatch"]):
    assert main([*argv, "--store", {store.root!r}]) == 0, argv
print(sorted(m for m in ("pyspark", "sqlglot", "grpc", "storelib.serve") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], env=python_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[]"
