"""The preamble the notebooks in ``notebooks/`` share, so each runs unchanged on Databricks and locally.

A notebook hands :func:`setup` its own globals. On Databricks they hold ``spark``, ``dbutils`` and
``display``: parameters are widgets, the notebook's folder comes from its context, results are
``display``-ed. Run locally (``python notebooks/quickstart.py``, or from a test with ``runpy``), the
session is the one given in the globals or :func:`storelib.session.get_spark`'s, parameters come from
``STORELIB_NOTEBOOK_<NAME>`` environment variables or the notebook's defaults, the folder is
``__file__``'s, results are printed and figures saved as PNG files (matplotlib's Agg backend).

>>> nb = setup({"__file__": tmp + "/nb/demo.py", "spark": spark}, "demo", store=tmp + "/s", messages="10")
>>> nb.on_databricks, nb.param("messages"), nb.int_param("messages"), nb.store == tmp + "/s"
(False, '10', 10, True)
>>> nb.path("../sql/x.sql") == Path(tmp) / "sql" / "x.sql", nb.output == Path(tmp) / "nb" / "output" / "demo"
(True, True)
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from storelib.admin.output import Output
from storelib.model.errors import StoreError
from storelib.session import get_spark
from storelib.storage.schema import TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["setup", "Notebook", "EmptyResultError", "ENV_PREFIX"]

#: Locally, parameter ``store`` is read from ``STORELIB_NOTEBOOK_STORE``, and so on.
ENV_PREFIX = "STORELIB_NOTEBOOK_"
#: What a store's folder may hold besides its tables, for :meth:`Notebook.fresh_store` to remove it.
#: The file :meth:`Notebook.fresh_store` leaves in a store it made: only such a store is removed by a later run.
MADE_BY_NOTEBOOK = "_made_by_notebook"
_STORE_EXTRAS = {"_staging", ".DS_Store", MADE_BY_NOTEBOOK}


class EmptyResultError(StoreError, AssertionError):
    """An example that should show rows showed none: the notebook stops instead of showing an empty table.

    >>> issubclass(EmptyResultError, StoreError)
    True
    """


@dataclass
class Notebook:
    """One run of a notebook: its session, parameters, folder, output folder, and how it shows things.

    >>> nb = setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo")
    >>> nb.show(spark.range(3).toDF("n"), title="three rows")     # doctest: +NORMALIZE_WHITESPACE
    three rows
    n
    -
    0
    1
    2
    [Row(n=0), Row(n=1), Row(n=2)]
    >>> nb.show([], title="nothing")
    Traceback (most recent call last):
    ...
    storelib.notebook.EmptyResultError: nothing: the example shows nothing
    """

    name: str
    spark: "SparkSession"
    #: The folder holding the notebook: relative paths (``../sql/...``) are resolved from it.
    directory: Path
    params: dict[str, str]
    on_databricks: bool = False
    display: Callable[[Any], None] | None = field(default=None, repr=False)

    @property
    def store(self) -> str:
        """The ``store`` parameter: where the notebook's store lives."""
        return self.params["store"]

    @property
    def output(self) -> Path:
        """The ``output`` parameter as a folder (created): where figures are saved as PNG."""
        path = Path(self.params["output"])
        path.mkdir(parents=True, exist_ok=True)
        return path

    def param(self, name: str) -> str:
        """A parameter's value, as text (widgets hold text).

        >>> setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo", group="GroupA").param("group")
        'GroupA'
        """
        if name not in self.params:
            raise StoreError(name, f"is not a parameter of notebook {self.name} (it has {sorted(self.params)})")
        return self.params[name]

    def int_param(self, name: str) -> int:
        """A parameter's value as a positive integer, or a :class:`StoreError` naming it.

        >>> setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo", messages="x").int_param("messages")
        Traceback (most recent call last):
        ...
        storelib.model.errors.StoreError: messages: must be a positive integer (got 'x')
        """
        raw = self.param(name)
        if not raw.strip().isdigit() or int(raw) <= 0:
            raise StoreError(name, "must be a positive integer", value=raw)
        return int(raw)

    def path(self, relative: str) -> Path:
        """A path relative to the notebook's folder (not to the working directory).

        >>> setup({"__file__": tmp + "/nb/demo.py", "spark": spark}, "demo").path("../sql").name
        'sql'
        """
        return (self.directory / relative).resolve()

    def fresh_store(self) -> str:
        """Remove the store an earlier run of a notebook made at :attr:`store`, so every run starts empty, and
        mark the folder as this run's (:data:`MADE_BY_NOTEBOOK`). Nothing else is ever removed: a folder holding
        anything but a store's tables, or a store no notebook made, is refused. Returns the store's path.

        >>> nb = setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo", store=tmp + "/fresh")
        >>> Path(nb.fresh_store(), "commitlog").mkdir(parents=True); nb.fresh_store() == nb.store
        True
        >>> (Path(nb.store) / MADE_BY_NOTEBOOK).unlink(); Path(nb.store, "commitlog").mkdir()
        >>> nb.fresh_store()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        storelib.model.errors.StoreError: store: holds a store no notebook made; ... (got ...)
        >>> shutil.rmtree(nb.store); Path(nb.store).mkdir(); _ = Path(nb.store, "notes.txt").write_text("mine")
        >>> nb.fresh_store()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        storelib.model.errors.StoreError: store: holds more than a store (notes.txt); choose an empty folder (got ...)
        """
        root = self.store
        if "://" in root or root.startswith("dbfs:"):
            return root  # an object store URI: left as it is (MessageStore.create opens what is there)
        folder = Path(root)
        if folder.is_dir():
            names = {p.name for p in folder.iterdir()}
            foreign = sorted(n for n in names if n not in TABLES and n not in _STORE_EXTRAS)
            if foreign:
                raise StoreError(
                    "store", f"holds more than a store ({', '.join(foreign[:3])}); choose an empty folder", value=root
                )
            if names & set(TABLES) and MADE_BY_NOTEBOOK not in names:
                raise StoreError(
                    "store",
                    "holds a store no notebook made; a notebook removes only its own: choose another folder",
                    value=root,
                )
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / MADE_BY_NOTEBOOK).write_text(f"made by the notebook {self.name}; its next run removes this store\n")
        return root

    def show(self, data: Any, n: int = 20, *, title: str | None = None) -> list:
        """Show a DataFrame (``display`` on Databricks, its first ``n`` rows printed locally), a list or one
        object, and return what was shown; :class:`EmptyResultError` when there is nothing to show."""
        from pyspark.sql import DataFrame

        if title:
            print(title)
        if isinstance(data, DataFrame):
            rows = data.limit(n).collect()
            if rows and self.on_databricks and self.display is not None:
                self.display(data.limit(n))
            elif rows:
                Output().table([r.asDict() for r in rows], data.columns)
        else:
            rows = list(data) if isinstance(data, (list, tuple)) else ([] if data is None else [data])
            for row in rows[:n]:
                print(f"  {row}")
        if not rows:
            raise EmptyResultError(title, "the example shows nothing")
        return rows

    def figure(self, fig: Any, filename: str) -> Path:
        """Save a matplotlib figure as PNG in :attr:`output` (shown inline on Databricks); returns its path.

        >>> nb = setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo")
        >>> fig, ax = nb.pyplot().subplots(); _ = ax.bar(["q0", "q1"], [3, 1])
        >>> p = nb.figure(fig, "lag.png")                         # doctest: +ELLIPSIS
        figure: .../output/demo/lag.png
        >>> p.name, p.stat().st_size > 0
        ('lag.png', True)
        """
        path = self.output / filename
        fig.savefig(path, dpi=100, bbox_inches="tight")
        if self.on_databricks and self.display is not None:
            self.display(fig)
        else:
            print(f"figure: {path}")
        self.pyplot().close(fig)
        return path

    def pyplot(self) -> Any:
        """``matplotlib.pyplot``, on the non-interactive Agg backend when run locally.

        >>> setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo").pyplot().get_backend().lower()
        'agg'
        """
        import matplotlib

        if not self.on_databricks:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt


def setup(notebook_globals: Mapping[str, Any], name: str, **defaults: str) -> Notebook:
    """Set a notebook up from its globals: the session, parameters ``store``, ``output`` and ``defaults``'
    (widgets on Databricks; ``STORELIB_NOTEBOOK_<NAME>`` variables or the defaults locally), its folder.

    Locally the store defaults to ``data/notebooks/<name>`` of the repository (beside ``notebooks/``) and
    figures to ``notebooks/output/<name>``; on Databricks to ``/tmp/storelib/notebooks/<name>`` (change
    the ``store`` widget to a Volume on a cluster of several nodes).

    >>> os.environ["STORELIB_NOTEBOOK_MESSAGES"] = "7"
    >>> setup({"__file__": tmp + "/demo.py", "spark": spark}, "demo", messages="100").int_param("messages")
    7
    >>> del os.environ["STORELIB_NOTEBOOK_MESSAGES"]
    """
    g = notebook_globals
    dbutils = g.get("dbutils")
    on_databricks = dbutils is not None
    if on_databricks:
        directory = _databricks_directory(dbutils)
    else:  # a script or runpy sets __file__; an interactive session has none: its working directory
        directory = Path(g["__file__"]).resolve().parent if g.get("__file__") else Path.cwd()
    if on_databricks:
        base = Path("/tmp/storelib/notebooks") / name
        standard = {"store": str(base / "store"), "output": str(base / "output")}
    else:
        standard = {
            "store": str(directory.parent / "data" / "notebooks" / name),
            "output": str(directory / "output" / name),
        }
    wanted = {**standard, **{k: str(v) for k, v in defaults.items()}}
    params = {}
    for key, default in wanted.items():
        if dbutils is not None:  # on_databricks
            dbutils.widgets.text(key, default)
            params[key] = dbutils.widgets.get(key)
        else:
            params[key] = os.environ.get(ENV_PREFIX + key.upper(), default)
    spark = g.get("spark")
    if spark is None:
        spark = _local_spark(name)
    return Notebook(name, spark, directory, params, on_databricks, g.get("display"))


def _local_spark(name: str) -> "SparkSession":
    """A session for a notebook run as a script; its Python workers import this checkout's storelib."""

    checkout = str(Path(__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if checkout not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([checkout, *paths])
    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    return get_spark(f"storelib-notebook-{name}")


def _databricks_directory(dbutils: Any) -> Path:
    """The notebook's folder in the workspace file system, from its context (else the working directory)."""
    try:
        context = dbutils.notebook.entry_point.getDbutils().notebook().getContext()
        path = context.notebookPath().get()
    except Exception:  # no notebook context (a job's Python file): its working directory is its folder
        return Path.cwd()
    path = path if path.startswith("/Workspace/") else "/Workspace" + path
    return Path(path).parent
