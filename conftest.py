"""Fixtures for the whole run: one real local Spark session, and what docstring examples run with.

Docstring examples (``--doctest-modules`` over ``storelib``) run as pyspark's own do: with ``spark``,
``F`` (``pyspark.sql.functions``), ``tmp`` (a fresh folder) and, where an example uses them, a
``store`` seeded with one dispatched message ``r`` (``TopicTest``, 4 queues; tags ``TagA``, key
``order-1``, property ``a=5``) to which ``GroupA`` subscribes ``TagA || TagB``. Each example gets
its own copy of the seeded store, so examples never depend on each other's order.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from tests.stores import copy_store  # noqa: E402

#: Tight on purpose: dispatch and bulk sends must never collect per-message data to the driver.
MAX_RESULT_SIZE = "4m"


@pytest.fixture(scope="session")
def spark():
    from storelib.session import get_spark

    session = get_spark(
        "storelib-tests",
        conf={
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",  # one task a core: 6-8% less time than 4 over three Spark-heavy files
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
            "spark.driver.maxResultSize": MAX_RESULT_SIZE,
            "spark.sql.adaptive.enabled": "false",
            "spark.databricks.delta.snapshotPartitions": "2",  # one task a core: small tables (spark-defaults.conf)
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def _seeded_store(spark, tmp_path_factory):
    """The template store docstring examples get a copy of, and the message it holds."""
    from storelib import Message, MessageStore

    root = str(tmp_path_factory.mktemp("doctest") / "seed")
    store = MessageStore.create(root, spark)
    store.create_topic("TopicTest", queues=4)
    sent = store.send(Message("TopicTest", body=b"hi", tags="TagA", keys=["order-1"], properties={"a": "5"}))
    store.subscribe("GroupA", "TopicTest", "TagA || TagB")
    store.dispatch()
    return root, sent


@pytest.fixture(autouse=True)
def _doctest_globals(request, doctest_namespace, tmp_path):
    """Give a docstring example what it names: ``spark``, ``F``, ``tmp``, and a seeded ``store`` and ``r``."""
    from _pytest.doctest import DoctestItem

    if not isinstance(request.node, DoctestItem):
        yield
        return
    text = "\n".join(e.source for e in request.node.dtest.examples)
    doctest_namespace["tmp"] = str(tmp_path)
    if any(name in text for name in ("spark", "store", "F.")):
        from pyspark.sql import functions as F

        doctest_namespace["spark"] = request.getfixturevalue("spark")
        doctest_namespace["F"] = F
    if "store" in text or re.search(r"\br\.", text):
        from storelib import MessageStore

        seed, sent = request.getfixturevalue("_seeded_store")
        copy = str(tmp_path / "store")
        copy_store(seed, copy)
        doctest_namespace["store"] = MessageStore.open(copy, request.getfixturevalue("spark"))
        doctest_namespace["r"] = sent
    yield
    store = doctest_namespace.pop("store", None)
    if store is not None:
        store.close()
    doctest_namespace.pop("r", None)


def pytest_unconfigure(config):
    """Say, as the run's last line, when RocketMQ's reference cases were not checked because their folder is absent."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skipped = [r for r in reporter.stats.get("skipped", []) if "conformance file" in str(r.longrepr)]
    if skipped:
        reporter.write_line(
            f"RocketMQ reference cases NOT checked: {len(skipped)} tests skipped because ../shared/conformance is "
            "absent beside the repository (set STORELIB_CONFORMANCE to its folder)",
            yellow=True,
            bold=True,
        )
