"""A user's first day with the command (issue 50): making a store, exit codes, options that do not go
together, times, and what waits for dispatch."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from storelib import Message, MessageStore
from storelib.admin import main
from storelib.cli import FAILED_AFTER_COMMIT


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, *argv: str) -> str:
    """The one error line of a command line that argparse refuses (exit code 2)."""
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    return err.strip().splitlines()[-1]


def test_store_create_makes_a_store_once_and_refuses_a_second_time(tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "s")
    code, out, _ = run(capsys, "store", "create", root)
    assert (code, out) == (0, f"created store at {root}: use it with --store {root} or export STORELIB_STORE={root}\n")
    MessageStore.open(root).close()  # a store: it opens
    code, out, err = run(capsys, "store", "create", root)
    assert (code, out) == (2, "") and "a store is at" in err and "nothing changed" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "store", "create", root, "--exist-ok", "--json")
    assert code == 0 and json.loads(out) == {"summary": f"a store is at {root} already: left as it is"}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    code, _, err = run(capsys, "store", "create", str(tmp_path / "notes"))
    assert code == 2 and "holds other files, not a store" in err
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["todo.txt"]  # nothing written among them
    monkeypatch.setenv("STORELIB_STORE", str(tmp_path / "from-env"))
    code, out, _ = run(capsys, "store", "create")
    assert code == 0 and out.startswith(f"created store at {tmp_path / 'from-env'}")
    code, _, err = run(capsys, "topic", "list", "--store", str(tmp_path / "typo"))
    assert code == 2 and "'storelib store create PATH'" in err  # the way to make one, from the command line


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["pull", "G", "TopicTest", "0", "--tag", "TagA", "--sql", "a > 1"],
            "--tag and --sql cannot be given together",
        ),
        (["subscribe", "G", "TopicTest", "--tag", "TagA", "--sql", "a > 1"], "--tag and --sql cannot be given"),
        (["subscribe", "G", "TopicTest", "--sql", "a > 1", "--filter-class", "m:C"], "--sql and --filter-class"),
        (["send", "TopicTest", "--file", "-", "--tags", "TagA"], "--file and --tags cannot be given together"),
        (["send", "TopicTest", "--file", "-", "--count", "3"], "--file and --count cannot be given together"),
        (["send", "TopicTest", "--delay-level", "2", "--deliver-time-ms", "1"], "--delay-level and --deliver-time-ms"),
        (["topic", "create", "X", "--queues", "2", "--read-queues", "4"], "--queues and --read-queues"),
        (["dispatch", "--round-ms", "5"], "--round-ms needs --follow"),
        (["dispatch", "--no-serve-pulls"], "--serve-pulls/--no-serve-pulls needs --follow"),
        (["serve", "--no-follow", "--follow", "thread"], "--no-follow and --follow cannot be given together"),
    ],
)
def test_options_that_do_not_go_together_are_refused_before_anything_is_written(store, capsys, argv, says):
    before = (store.max_offset(), store.context.registry.all(), sorted(store.context.topics.all()))
    assert says in refused(capsys, *argv, "--store", store.root)
    assert (store.max_offset(), store.context.registry.all(), sorted(store.context.topics.all())) == before
    code, _, _ = run(capsys, "subscribe", "G", "TopicTest", "--tag", "TagA", "--filter-class", "m:C", "--store", "/x")
    assert code == 2  # a tag with a filter class goes together (the class's tags): refused only for the store


def _command(python_env: dict, *argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "storelib", *argv],
        env=python_env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def test_a_failure_after_a_commit_has_its_own_exit_code_and_words(tmp_path, python_env):
    """A send that committed and then could not print (stdout is a full disk: /dev/full) must not say
    rerunning is safe: rerunning sends the messages again. So must a pull that committed its offset."""
    root = str(tmp_path / "s")
    store = MessageStore.create(root)
    store.create_topic("Orders", queues=1)
    store.subscribe("G", "Orders", "*")
    store.close()
    with open("/dev/full", "w") as full:
        sent = _command(python_env, "send", "Orders", "--count", "3", "--store", root, stdout=full)
    assert sent.returncode == FAILED_AFTER_COMMIT == 3, sent.stderr
    assert sent.stderr.startswith("storelib send failed after committing 3 messages sent to Orders")
    assert "Do not simply rerun: rerunning sends them again" in sent.stderr and sent.stderr.count("\n") == 1
    assert "rerunning is safe" not in sent.stderr and "half-written" not in sent.stderr
    store = MessageStore.open(root)
    assert store.context.tables.commitlog.read_arrow(columns=["topic"]).num_rows == 3  # sent once, and it stands
    store.dispatch()
    store.close()
    with open("/dev/full", "w") as full:
        pulled = _command(python_env, "pull", "G", "Orders", "0", "--commit", "--store", root, stdout=full)
    assert pulled.returncode == 3 and "after committing G's offset of Orders queue 0: 3" in pulled.stderr
    assert "pull those again with OFFSET 0" in pulled.stderr and pulled.stderr.count("\n") == 1
    assert MessageStore.open(root).committed_offset("G", "Orders", 0) == 3
    with open("/dev/full", "w") as full:  # a store made: a rerun would refuse, so no "rerunning is safe"
        made = _command(python_env, "store", "create", str(tmp_path / "new"), stdout=full)
    assert made.returncode == 3 and f"after committing the store at {tmp_path / 'new'}" in made.stderr
    MessageStore.open(str(tmp_path / "new")).close()
    with open("/dev/full", "w") as full:  # nothing committed: the ordinary failure, which says so
        plain = _command(python_env, "pull", "G", "Orders", "0", "0", "--store", root, stdout=full)
    assert plain.returncode == 1 and "after committing" not in plain.stderr


def test_times_are_times_in_tables_and_epoch_ms_in_json(store, capsys):
    r = store.send(Message("TopicTest", keys=["k"], body=b"x"))
    store.dispatch()
    m = store.query_by_id(r.msg_id)
    ms = int(m.store_timestamp.timestamp() * 1000)
    code, out, _ = run(capsys, "query", "id", r.msg_id, "--store", store.root, "--json")
    rec = json.loads(out)
    assert rec["Store Timestamp"] == ms and isinstance(rec["Born Timestamp"], int)
    code, out, _ = run(capsys, "query", "id", r.msg_id, "--store", store.root)
    shown = m.store_timestamp.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.")
    assert f"Store Timestamp:   {shown}" in out
    code, out, _ = run(capsys, "query", "key", "TopicTest", "k", "--store", store.root, "--json")
    assert json.loads(out)[0]["Store Timestamp"] == ms
    code, out, _ = run(capsys, "topic", "status", "TopicTest", "--store", store.root, "--json")
    assert [q["last_store_time"] for q in json.loads(out) if q["queue_id"] == r.queue_id] == [ms]


def test_lookups_find_what_waits_for_dispatch_and_say_how_much_waits(store, spark, capsys):
    root = store.root
    old = store.send(Message("TopicTest", keys=["order-1"], body=b"old", queue_id=0))
    store.dispatch()
    sent = store.send_batch([Message("TopicTest", keys=["order-1"], body=b"new", queue_id=q) for q in (0, 1, 1)])
    assert store.undispatched("TopicTest") == {("TopicTest", 0): 1, ("TopicTest", 1): 2}
    newest_first = [r.msg_id for r in reversed(sent)] + [old.msg_id]
    assert [m.msg_id for m in store.query_by_key("TopicTest", "order-1")] == newest_first
    source = spark.read.format("rocketmq").option("store", root).load()  # the data source finds the same
    found = source.where("topic = 'TopicTest' AND keys = 'order-1'").select("msg_id").collect()
    assert sorted(r.msg_id for r in found) == sorted(newest_first)
    assert store.query_by_unique_key("TopicTest", sent[1].uniq_key).msg_id == sent[1].msg_id

    waits = "note: 3 messages sent to TopicTest wait for dispatch (look-ups find them; pulls, topic status and lag"
    code, out, err = run(capsys, "query", "key", "TopicTest", "order-1", "--store", root)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[2:]] == newest_first
    assert err.startswith(waits) and "run 'storelib dispatch'" in err and err.count("\n") == 1
    code, out, err = run(capsys, "query", "id", sent[2].msg_id, "--store", root)
    assert code == 0 and f"OffsetID:          {sent[2].msg_id}" in out and err.startswith(waits)
    code, out, err = run(capsys, "query", "unique-key", "TopicTest", sent[0].uniq_key, "--store", root, "--json")
    assert code == 0 and json.loads(out)["OffsetID"] == sent[0].msg_id and err.startswith(waits)
    code, out, err = run(capsys, "query", "offset", "TopicTest", "1", "0", "--store", root)
    assert code == 1 and "2 more wait for dispatch: run 'storelib dispatch'" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "topic", "status", "TopicTest", "--store", root, "--json")
    status = {q["queue_id"]: (q["max_offset"], q["undispatched"]) for q in json.loads(out)}
    assert status == {0: (1, 1), 1: (0, 2), 2: (0, 0), 3: (0, 0)}
    code, out, _ = run(capsys, "topic", "status", "TopicTest", "--store", root)
    assert out.splitlines()[-1] == (
        "3 messages sent to TopicTest wait for dispatch, not counted in max_offset: run 'storelib dispatch' "
        "(or keep 'storelib dispatch --follow' running)"
    )

    store.dispatch()
    assert store.undispatched() == {}
    assert [m.msg_id for m in store.query_by_key("TopicTest", "order-1")] == newest_first  # the same, now indexed
    code, out, err = run(capsys, "query", "key", "TopicTest", "order-1", "--store", root)
    assert code == 0 and err == ""
    code, out, _ = run(capsys, "topic", "status", "TopicTest", "--store", root)
    assert "wait for dispatch" not in out and out.splitlines()[-1].split()[:3] == ["3", "0", "0"]


def test_times_are_taken_as_epoch_ms_or_iso_times(store, capsys):
    store.send(Message("TopicTest", keys=["dated"]))
    root = store.root
    code, out, _ = run(capsys, "query", "key", "TopicTest", "dated", "--begin", "2000-01-01T00:00:00", "--store", root)
    assert code == 0 and "dated" in out
    code, _, _ = run(
        capsys, "query", "key", "TopicTest", "dated", "--end", "2000-01-01 00:00:00+02:00", "--store", root
    )
    assert code == 1
    code, out, _ = run(capsys, "query", "key", "TopicTest", "dated", "--end", "4102444800000", "--store", root)
    assert code == 0 and "dated" in out
    assert "epoch milliseconds or an ISO 8601 time" in refused(capsys, "query", "key", "T", "k", "--begin", "yesterday")
