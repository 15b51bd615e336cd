"""A reader that closes the command's output early (``| head``) is no failure of what the command did."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from storelib import Message, MessageStore


def test_a_reader_closing_the_output_leaves_the_send_done_and_says_so(tmp_path, python_env):
    root = str(tmp_path / "store")
    store = MessageStore.create(root)
    store.create_topic("Orders", queues=2)
    store.close()
    lines = tmp_path / "orders.jsonl"
    lines.write_text("".join(json.dumps({"body": f"order {i}", "keys": [f"k{i}"]}) + "\n" for i in range(5000)))
    run = _into_head(f"send Orders --file {lines} --json --store {root}", python_env)
    assert "exit=141" in run.stderr, run.stderr[-800:]
    assert "what the command did stands" in run.stderr
    assert "half-written" not in run.stderr.lower() and "nothing was written" not in run.stderr.lower()
    assert "Traceback" not in run.stderr
    committed = MessageStore.open(root).context.tables.commitlog.read_arrow(columns=["topic"])
    assert committed.num_rows == 5000  # every message sent, once: rerunning would have duplicated them


def test_a_pull_that_committed_says_what_stands_when_the_reader_goes(tmp_path, python_env):
    """``pull --commit | head``: the offset stays committed (exit 141), and the line says where it stands and
    how to read again what the reader did not take."""
    root = str(tmp_path / "store")
    store = MessageStore.create(root)
    store.create_topic("Orders", queues=1)
    store.subscribe("G", "Orders", "*")
    store.send_batch([Message("Orders", body=b"x" * 16_384) for _ in range(32)])  # more than a pipe holds
    store.dispatch()
    store.close()
    run = _into_head(f"pull G Orders 0 --commit --json --store {root}", python_env)
    assert "exit=141" in run.stderr, run.stderr[-800:]
    n = MessageStore.open(root).committed_offset("G", "Orders", 0)  # a pull takes at most 256 KiB
    assert n > 0 and f"what the command did stands: G's offset of Orders queue 0: {n} (rerunning pulls from {n}" in (
        run.stderr
    )
    assert "pull those again with OFFSET 0" in run.stderr and "Traceback" not in run.stderr


def _into_head(arguments: str, python_env: dict) -> subprocess.CompletedProcess:
    """``python -m storelib ARGUMENTS | head -c 10``, its exit code said on stderr as ``exit=N``."""
    return subprocess.run(
        [
            "bash",
            "-c",
            f"python -m storelib {arguments} | head -c 10 > /dev/null; " + 'echo "exit=${PIPESTATUS[0]}" >&2',
        ],
        env={**python_env, "PATH": os.path.dirname(sys.executable) + os.pathsep + python_env["PATH"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
