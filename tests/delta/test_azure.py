"""The store on Azure Blob Storage / ADLS (``az://``, ``abfss://``), against a local Azurite server.

Azurite comes from the npm registry (installed once into ``~/.cache/storelib-tests``); where this machine
has no Node.js or cannot install it, these tests are skipped: the S3 tests cover object storage in any case.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from storelib import Message, MessageStore
from storelib.delta.location import filesystem
from tests.network import port_free

#: Azurite's well-known development account (public, in Microsoft's documentation).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CACHE = Path.home() / ".cache" / "storelib-tests" / "azurite"


def _azurite() -> Path | None:
    """Azurite's blob server, installed into the cache if need be; None when it cannot be had."""
    binary = CACHE / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    if shutil.which("npm") is None or shutil.which("node") is None:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(CACHE), "azurite@3"],
            check=True,
            timeout=300,
            capture_output=True,
        )
    except (subprocess.SubprocessError, OSError):
        return None
    return binary if binary.exists() else None


#: deltalake reaches Azurite in its emulator mode only (``AZURE_STORAGE_USE_EMULATOR``), on Azurite's port: with
#: a custom ``AZURE_STORAGE_ENDPOINT`` it fails to load a table's versions ("Invalid table version: 1", measured).
PORT = 10000


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """A running Azurite blob server for the module; its options are set as the standard AZURE_* variables."""
    binary = _azurite()
    if binary is None:
        pytest.skip("no Azurite: Node.js and npm are needed to install it")
    port = PORT
    if not port_free(port):
        pytest.skip(f"port {port} (Azurite's, which deltalake's emulator mode needs) is taken")
    folder = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen(
        [
            str(binary),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(folder),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.skip("Azurite did not start")
            time.sleep(0.1)
    env = {
        "AZURE_STORAGE_USE_EMULATOR": "true",
        "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
        "AZURE_STORAGE_ACCOUNT_KEY": KEY,
    }
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fs, _ = filesystem("az://storelib/x")
    fs.create_dir("storelib")  # the container
    yield env
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    proc.terminate()
    proc.wait(timeout=30)


def test_a_store_on_azure_sends_dispatches_finds_and_verifies(azurite):
    root = f"az://storelib/store-{time.time_ns()}"
    store = MessageStore.create(root)
    store.create_topic("Orders", queues=2)
    sent = store.send_batch([Message("Orders", tags="a", keys=["k1"], body=b"x"), Message("Orders", body=b"y")])
    store.subscribe("G", "Orders", "a")
    assert store.dispatch().consume_queue_rows == 2
    assert store.query_by_id(sent[0].msg_id).body == b"x"
    assert [m.uniq_key for m in store.query_by_key("Orders", "k1")] == [sent[0].uniq_key]
    assert [m.msg_id for m in store.pull("G", "Orders", sent[0].queue_id, 0).messages] == [sent[0].msg_id]
    store.close()
    assert MessageStore.verify(root) == []
    assert MessageStore.open(root).max_offset() == sent[-1].commitlog_offset + store.query_by_id(sent[-1].msg_id).size


def test_two_writers_on_azure_lose_and_duplicate_nothing(azurite):
    root = f"az://storelib/race-{time.time_ns()}"
    MessageStore.create(root).create_topic("Orders", queues=1)
    handles = [MessageStore.open(root), MessageStore.open(root)]  # no file lock on object storage: the put decides
    results: list[list] = [[], []]

    def send(i: int) -> None:
        for n in range(4):
            results[i].append(handles[i].send(Message("Orders", queue_id=0, body=f"{i}-{n}".encode())))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    offsets = sorted(r.queue_offset for rs in results for r in rs)
    assert offsets == list(range(8))
    handles[0].dispatch()
    bodies = sorted(m.body for m in handles[0].get_message("G", "Orders", 0, 0, 64).messages)
    assert bodies == sorted(f"{i}-{n}".encode() for i in range(2) for n in range(4))
    for h in handles:
        h.close()
