"""A reader that closes the command's output early (``| head``) is no failure of what the command did."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from storelib import MessageStore


def test_a_reader_closing_the_output_leaves_the_send_done_and_says_so(tmp_path, python_env):
    root = str(tmp_path / "store")
    store = MessageStore.create(root)
    store.create_topic("Orders", queues=2)
    store.close()
    lines = tmp_path / "orders.jsonl"
    lines.write_text("".join(json.dumps({"body": f"order {i}", "keys": [f"k{i}"]}) + "\n" for i in range(5000)))
    run = subprocess.run(
        [
            "bash",
            "-c",
            f"python -m storelib send Orders --file {lines} --json --store {root} | head -c 10 > /dev/null; "
            'echo "exit=${PIPESTATUS[0]}" >&2',
        ],
        env={**python_env, "PATH": os.path.dirname(sys.executable) + os.pathsep + python_env["PATH"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "exit=141" in run.stderr, run.stderr[-800:]
    assert "what the command did stands" in run.stderr
    assert "half-written" not in run.stderr.lower() and "nothing was written" not in run.stderr.lower()
    assert "Traceback" not in run.stderr
    committed = MessageStore.open(root).context.tables.commitlog.read_arrow(columns=["topic"])
    assert committed.num_rows == 5000  # every message sent, once: rerunning would have duplicated them
