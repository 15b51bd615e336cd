"""Every command block of the README and ``docs/*.md`` that runs ``storelib`` runs here, as written.

A block is a fenced block without a language (or ``bash``, ``sh``, ``shell``, ``console``) in which a command
is ``storelib ...`` or ``python -m storelib ...``. Each runs in a fresh folder, with ``storelib`` and
``python`` on ``PATH`` and ``$STORELIB_STORE`` naming a store made there; its commands run one by one
through bash, and each must exit 0. In a transcript (commands after ``$ ``), the lines shown after a
command are its output: each must match a line of what it printed, in order, with numbers, ids and column
widths free (a time, an offset or a message id differs from run to run; the words and columns may not).

Commands that run until stopped (``storelib serve``, ``... --follow``) are started, stopped with SIGTERM
once they say they are serving, and must then exit 0 (``--port 8081`` taken by another process: port 0).
``export`` lines set the variables of the commands after them; one whose values are ``...`` is the reader's
to fill in, and the test's environment supplies them (for ``s3://`` roots: a local S3 server, with the
bucket the block names). A block may be left out
only for starting Spark, said in a comment just before it (``<!-- not run by ...: starts Spark ... -->``),
which keeps this test to seconds.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from storelib import MessageStore
from tests.network import port_free

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"", "bash", "sh", "shell", "console"}
#: What a command that runs until stopped says once it is serving.
READY = ("serving RocketMQ 5 gRPC on", "following the commitlog from offset")
_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
_STORELIB = re.compile(r"^(?:\S*/)?(?:storelib|python3? -m storelib) ")


class Block:
    """One command block: where it is, its commands (each with the output it shows), and why it is not run."""

    def __init__(self, path: Path, line: int, body: str, before: str):
        self.where = f"{path.relative_to(ROOT)}:{line}"
        lines = body.splitlines()
        transcript = any(x.startswith("$ ") for x in lines)
        self.commands: list[tuple[str, list[str]]] = []
        for text in lines:
            if transcript and not text.startswith("$ "):
                if self.commands and text.strip():
                    self.commands[-1][1].append(text)
                continue
            text = text.removeprefix("$ ").strip()
            if text and not text.startswith("#"):
                self.commands.append((text, []))
        self.runs_storelib = any(_STORELIB.match(c) or "| storelib " in c for c, _ in self.commands)
        marker = re.search(r"<!--\s*not run by[^>]*-->\s*$", before)
        self.not_run = marker.group(0) if marker else None


def blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in _BLOCK.finditer(text):
            if m.group("lang") not in SHELL:
                continue
            body = "\n".join(x[len(m.group("indent")) :] for x in m.group("body").splitlines())
            block = Block(path, text.count("\n", 0, m.start()) + 1, body, text[: m.start()])
            if block.runs_storelib:
                found.append(block)
    return found


BLOCKS = blocks()


def test_the_docs_have_command_blocks_and_leave_out_only_what_starts_spark():
    assert {b.where.split(":")[0] for b in BLOCKS} >= {"README.md", "docs/guide.md", "docs/object_storage.md"}
    for b in BLOCKS:
        assert b.not_run is None or "starts Spark" in b.not_run, (b.where, b.not_run)


def _shape(line: str) -> re.Pattern:
    """A pattern for an output line as the docs show it: ids, numbers, runs of spaces and of dashes free."""
    parts = []
    for token in re.findall(r"[0-9A-F]{32}|\d+(?:\.\d+)?|\s+|-{2,}|.", line.strip()):
        if re.fullmatch(r"[0-9A-F]{32}", token):
            parts.append(r"[0-9A-F]{32}")
        elif token[0].isdigit():
            parts.append(r"\d+(?:\.\d+)?")
        elif token.isspace():
            parts.append(r"\s+")
        elif token.startswith("--"):
            parts.append(r"-+")
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


@pytest.fixture
def shell(tmp_path, python_env) -> dict:
    """A fresh folder with ``storelib`` and ``python`` on ``PATH`` and a store at ``$STORELIB_STORE``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "storelib").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m storelib "$@"\n')
    (bin_dir / "storelib").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    store = tmp_path / "work" / "store"
    MessageStore.create(str(store)).close()
    env = {**python_env, "PATH": f"{bin_dir}{os.pathsep}{python_env['PATH']}", "STORELIB_STORE": str(store)}
    return {"env": env, "cwd": tmp_path / "work"}


def _exports(command: str, env: dict) -> None:
    """Apply an ``export`` line to ``env``; one with a ``...`` value is the reader's: the test's values stand."""
    assignments = shlex.split(command)[1:]
    if any(a.partition("=")[2] == "..." for a in assignments):
        return
    for a in assignments:
        name, _, value = a.partition("=")
        env[name] = re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), ""), value)  # as bash expands it


def _until_ready(command: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Start a command that runs until stopped, SIGTERM it once it says it is serving, and collect it."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    said: dict[str, list[str]] = {"out": [], "err": []}
    ready = threading.Event()

    def drain(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)
            if any(r in line for r in READY):
                ready.set()

    readers = [
        threading.Thread(target=drain, args=(p, said[k])) for k, p in (("out", process.stdout), ("err", process.stderr))
    ]
    for r in readers:
        r.start()
    deadline = time.monotonic() + 60
    while not ready.wait(0.05) and process.poll() is None and time.monotonic() < deadline:
        pass
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=60)
    for r in readers:
        r.join(timeout=10)
    return subprocess.CompletedProcess(command, code, "".join(said["out"]), "".join(said["err"]))


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_the_command_block_runs_as_written(block, shell, request):
    if block.not_run:
        pytest.skip(block.not_run)
    env, cwd = dict(shell["env"]), shell["cwd"]
    if any("s3://" in c for c, _ in block.commands):
        s3 = request.getfixturevalue("s3")  # a local S3 server stands in for the reader's
        env.update(s3.options)
        for bucket in {m for c, _ in block.commands for m in re.findall(r"s3://([\w.-]+)", c)}:
            _bucket(s3, bucket)
    for command, shown in block.commands:
        if command.startswith("export "):
            _exports(command, env)
            continue
        if "--port 8081" in command and not port_free(8081):  # another process has it: the command stands
            command = command.replace("--port 8081", "--port 0")
        if command.startswith("storelib serve") or " --follow" in command:
            done = _until_ready(command, env, cwd)
            assert done.returncode == 0 and "stopped by SIGTERM" in done.stdout, (block.where, command, done.stderr)
            continue
        done = subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (block.where, command, done.stderr[-2000:])
        printed = iter(x.strip() for x in done.stdout.splitlines())
        for line in shown:  # each shown line, in order, among the printed ones
            pattern = _shape(line)
            assert any(pattern.fullmatch(x) for x in printed), (block.where, command, line, done.stdout)


def _bucket(s3, name: str) -> None:
    client = s3.client()
    if name not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=name)
