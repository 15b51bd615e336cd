"""The notebooks in ``notebooks/``, each run end to end against a fresh store, as a user runs them locally.

In this process they run with the test session (``runpy``, as ``python notebooks/NAME.py`` would, with
``spark`` already in their globals as on Databricks); the quick start also runs as a script in a process
of its own, from the installed wheel (``tests/test_packaging.py``). Every example in them asserts what it
shows, so a notebook whose example goes empty fails here.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from storelib.notebook import ENV_PREFIX, EmptyResultError, setup

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("*.py") if not p.name.startswith("_"))
PNG = b"\x89PNG\r\n\x1a\n"

#: The figures each notebook saves.
FIGURES = {
    "quickstart": {"messages_per_queue.png"},
    "filtering": {"messages_per_minute_per_tag.png", "files_and_row_groups_skipped.png"},
    "finding_messages": set(),
    "consumer_lag": {"lag_per_queue.png"},
    "delayed_and_transactions": {"delivered_per_run.png"},
}


def test_every_notebook_is_a_databricks_source_notebook_with_known_figures():
    assert {p.stem for p in NOTEBOOKS} == set(FIGURES)
    for path in NOTEBOOKS:
        text = path.read_text()
        assert text.startswith("# Databricks notebook source\n"), path.name
        assert "\n# COMMAND ----------\n" in text and "# MAGIC %md" in text, path.name
        assert f'setup(globals(), "{path.stem}"' in text, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_end_to_end(spark, tmp_path, monkeypatch, path):
    output = tmp_path / "output"
    monkeypatch.setenv(ENV_PREFIX + "STORE", str(tmp_path / "store"))
    monkeypatch.setenv(ENV_PREFIX + "OUTPUT", str(output))
    monkeypatch.chdir(tmp_path)  # paths (sql/...) come from the notebook's folder, not the working directory
    # __main__: the transactions notebook registers a checker of its own module, as a script's is
    names = runpy.run_path(str(path), init_globals={"spark": spark}, run_name="__main__")
    nb = names["nb"]
    assert nb.spark is spark and nb.store == str(tmp_path / "store") and not nb.on_databricks
    saved = {p.name for p in output.glob("*.png")}
    assert saved == FIGURES[path.stem]
    for name in saved:
        data = (output / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name  # a drawn figure, not an empty canvas


class _Widgets:
    def __init__(self, values):
        self.values, self.made = values, []

    def text(self, name, default, label=None):
        self.made.append((name, default))

    def get(self, name):
        return self.values.get(name, dict(self.made)[name])


class _Dbutils:
    """What a notebook's globals hold on Databricks (only the parts the preamble uses; no notebook context)."""

    def __init__(self, values):
        self.widgets = _Widgets(values)


def test_on_databricks_parameters_are_widgets_and_results_are_displayed(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENV_PREFIX + "MESSAGES", "999")  # ignored on Databricks: widgets win
    shown = []
    dbutils = _Dbutils({"store": str(tmp_path / "s")})
    nb = setup({"spark": spark, "dbutils": dbutils, "display": shown.append}, "demo", messages="10")
    assert nb.on_databricks and nb.directory == tmp_path  # no notebook context: its working directory
    assert (nb.store, nb.int_param("messages")) == (str(tmp_path / "s"), 10)
    assert [name for name, _ in dbutils.widgets.made] == ["store", "output", "messages"]
    assert dict(dbutils.widgets.made)["output"] == "/tmp/storelib/notebooks/demo/output"
    rows = nb.show(spark.range(2).toDF("n"))
    assert [r.n for r in rows] == [0, 1] and len(shown) == 1
    with pytest.raises(EmptyResultError):
        nb.show(spark.range(0))


def test_a_notebook_never_removes_a_store_it_did_not_make(spark, tmp_path, monkeypatch):
    from storelib import Message, MessageStore
    from storelib.model.errors import StoreError

    real = MessageStore.create(str(tmp_path / "real"), spark)
    real.create_topic("Orders")
    real.send(Message("Orders", body=b"kept"))
    real.close()
    monkeypatch.setenv(ENV_PREFIX + "STORE", str(tmp_path / "real"))
    with pytest.raises(StoreError, match="holds a store no notebook made"):
        runpy.run_path(str(ROOT / "notebooks" / "quickstart.py"), init_globals={"spark": spark}, run_name="__main__")
    assert MessageStore.open(str(tmp_path / "real"), spark).max_offset() > 0  # still there, whole
