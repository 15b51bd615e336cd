"""Shared fixtures: a fresh store on disk per test (the Spark session is the root conftest's)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stores import copy_store  # noqa: E402


@pytest.fixture
def ansi(spark):
    """The session with ANSI mode on (Spark 4's default), restored afterwards."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    yield spark
    spark.conf.set("spark.sql.ansi.enabled", before)


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "store")


@pytest.fixture(scope="session")
def _fresh_store(spark, tmp_path_factory) -> str:
    """The template every ``store`` is a copy of (:func:`tests.stores.copy_store`)."""
    from storelib import MessageStore

    root = str(tmp_path_factory.mktemp("template") / "store")
    made = MessageStore.create(root, spark)
    made.create_topic("TopicTest", queues=4)
    made.close()
    return root


@pytest.fixture
def store(spark, store_path, _fresh_store):
    """A fresh store at ``store_path`` with ``TopicTest`` (4 queues): a copy of one made once per run."""
    from storelib import MessageStore

    copy_store(_fresh_store, store_path)
    s = MessageStore.open(store_path, spark)
    yield s
    s.close()  # its producers, and the machine's committer role with them (storelib.local.relay)


@pytest.fixture
def python_env() -> dict:
    """Environment for subprocesses that run jobs with this interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("STORELIB_SPARK_LOG_LEVEL", "ERROR")
    return env


from jobs.benchmarks.s3_proxy_process import start_moto  # noqa: E402


class S3Server:
    """A local S3 server (``moto_server``) for the run: its endpoint, the options that reach it, and buckets.

    ``env`` is what a subprocess needs to reach it through the standard AWS variables alone.
    """

    def __init__(self, port: int, process):
        self.port, self.process = port, process
        self.endpoint = f"http://127.0.0.1:{port}"
        self.options = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }
        self._buckets = 0

    @property
    def env(self) -> dict:
        return {**os.environ, **self.options}

    def client(self):
        """A boto3 client of the server (to look at what the store wrote)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def keys(self, uri: str) -> list[str]:
        """The keys under an ``s3://bucket[/prefix]`` URI, relative to it, sorted (what the store wrote there)."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        start = f"{prefix.rstrip('/')}/" if prefix else ""
        listed = self.client().list_objects_v2(Bucket=bucket, Prefix=start).get("Contents", [])
        return sorted(o["Key"][len(start) :] for o in listed)

    def bucket(self, prefix: str = "store") -> str:
        """A new, empty bucket; returns its ``s3://`` URI."""
        self._buckets += 1
        name = f"{prefix.lower()}-{os.getpid()}-{self._buckets}"
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def copy(self, uri: str, prefix: str = "store") -> str:
        """A copy of what is under ``uri`` (``s3://bucket/path``) at the same path of a new bucket, copied by the
        server itself; returns the copy's URI. A store is copied whole so: its objects dated now, as if just made
        (as :func:`tests.stores.copy_store` does on disk)."""
        bucket, _, path = uri.removeprefix("s3://").partition("/")
        copied = self.bucket(prefix)
        client = self.client()
        for key in self.keys(uri):
            name = f"{path}/{key}"
            client.copy_object(
                Bucket=copied.removeprefix("s3://"), Key=name, CopySource={"Bucket": bucket, "Key": name}
            )
        return f"{copied}/{path}"


@pytest.fixture(scope="session")
def s3():
    """The run's local S3 server, stopped at the end."""
    port, process = start_moto()
    yield S3Server(port, process)
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_template(spark, s3):
    """``s3_template(queues)``: the ``s3://`` URI of a store made once per run on the local S3 server, with
    ``TopicTest`` of ``queues`` queues, for :meth:`S3Server.copy` (a create there costs ~300 requests and
    ~2 s, a copy ~20 requests and ~0.1 s)."""
    from storelib import MessageStore

    made: dict[int, str] = {}

    def template(queues: int) -> str:
        if queues not in made:
            s = MessageStore.create(s3.bucket("template") + "/store", spark, storage_options=s3.options)
            s.create_topic("TopicTest", queues=queues)
            s.close()
            made[queues] = s.root
        return made[queues]

    return template


@pytest.fixture
def s3_store(spark, s3, s3_template):
    """A fresh store in a new bucket of the local S3 server, with ``TopicTest`` (4 queues): a copy of one made
    once per run."""
    from storelib import MessageStore

    s = MessageStore.open(s3.copy(s3_template(4)), spark, storage_options=s3.options)
    yield s
    s.close()
