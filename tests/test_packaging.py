"""The wheel: built from the checkout, installed into a fresh environment, used from another folder.

The SQL files, ``spark-defaults.conf`` and the log settings travel in it (package data, or data files under
``<prefix>/share/storelib``); the command works without the checkout, and the quick start notebook runs as a
script from another folder (its SQL files and figures included). The dependencies are the test environment's
own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """``{"python": ..., "storelib": ..., "env": ..., "wheel": ...}`` of a fresh environment with the wheel."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(work.glob("storelib-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(  # with no PYTHONPATH: a checkout on it would count as storelib already installed
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    # the dependencies from the test environment; its own storelib (the checkout's, installed editable) is
    # reached only through a .pth file, which PYTHONPATH's folders do not run
    env = {**os.environ, "PYTHONPATH": sysconfig.get_path("purelib")}
    env.pop("STORELIB_STORE", None)
    return {"python": str(python), "storelib": str(venv / "bin" / "storelib"), "env": env, "wheel": wheel}


def test_the_wheel_holds_the_sql_files_defaults_and_log_settings(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    sql = sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.endswith(".sql")) == sql
    assert any(n.endswith("share/storelib/spark-defaults.conf") for n in names)
    assert "storelib/log4j2.properties" in names and "storelib/py.typed" in names


def test_the_installed_command_works_from_another_folder(installed, tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        command = [installed["storelib"], *args]
        return subprocess.run(command, cwd=tmp_path, env=installed["env"], capture_output=True, text=True, timeout=120)

    where = subprocess.run(
        [installed["python"], "-c", "import storelib, storelib.session as s; print(storelib.__file__,s.DEFAULTS_FILE)"],
        cwd=tmp_path,
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    module, defaults = where.stdout.split()
    assert str(ROOT) not in module and Path(defaults).is_file() and str(ROOT) not in defaults
    store = str(tmp_path / "store")
    assert run("store", "create", store).returncode == 0
    assert run("topic", "create", "Orders", "--store", store).returncode == 0
    sent = run("send", "Orders", "--body", "hello", "--keys", "k1", "--store", store, "--json")
    assert sent.returncode == 0, sent.stderr
    found = run("query", "key", "Orders", "k1", "--store", store, "--json")
    assert found.returncode == 0 and "hello" in found.stdout, found.stderr
    # the installed SQL file, found from this folder with the store from $STORELIB_STORE, its parameters checked
    # before Spark starts (tests/admin/test_sql_verb.py runs the files through Spark)
    refused = subprocess.run(
        [installed["storelib"], "sql", "message_by_id"],
        cwd=tmp_path,
        env={**installed["env"], "STORELIB_STORE": store},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "message_by_id.sql needs :msg_id" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_the_quickstart_notebook_runs_as_a_script_with_the_wheel_from_another_folder(installed, tmp_path):
    from storelib.notebook import ENV_PREFIX

    env = {
        **installed["env"],
        "PYSPARK_PYTHON": installed["python"],
        "STORELIB_SPARK_LOG_LEVEL": "ERROR",
        ENV_PREFIX + "STORE": str(tmp_path / "store"),
        ENV_PREFIX + "OUTPUT": str(tmp_path / "out"),
        ENV_PREFIX + "MESSAGES": "400",
    }
    out = subprocess.run(
        [installed["python"], str(ROOT / "notebooks" / "quickstart.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sql/messages_by_key.sql" in out.stdout and "consumer lag of Shipping" in out.stdout
    assert (tmp_path / "out" / "messages_per_queue.png").read_bytes().startswith(b"\x89PNG")
    assert ":: resolving dependencies" not in out.stderr  # Delta's jars as an earlier session resolved them
    assert "Traceback" not in out.stderr  # no Python worker's at exit either
