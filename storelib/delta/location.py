"""Where a store lives: a local folder or an object-store URI, and the options that reach it.

A store's root is a path or a URI (``s3://``, ``s3a://``, ``gs://``, ``abfss://``, ``az://``). Object
stores need credentials and an endpoint: they come from ``storage_options=`` (deltalake's keys, e.g.
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``), from ``spark.storelib.storage.<KEY>`` settings, or from the
standard environment variables, in that order. :func:`register` keeps a root's options for this process;
every Delta, pyarrow and executor call asks :func:`options_for` with the path it touches, and
:func:`ship` hands them to Spark's Python workers (``SparkContext.environment``), so executors on other
machines reach the same bucket without the user repeating anything.

>>> register("s3://bucket/store", {"aws_endpoint_url": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"})
>>> options_for("s3://bucket/store/commitlog/part-1.parquet")["AWS_ENDPOINT_URL"]
'http://127.0.0.1:9000'
>>> options_for("/tmp/store") is None, is_local("s3://bucket/store"), is_local("file:///tmp/store")
(True, False, True)
>>> forget("s3://bucket/store")
"""

from __future__ import annotations

import functools
import json
import os
import threading
from typing import Any, Mapping
from urllib.parse import urlsplit

from pyarrow import fs

from storelib.model.config import SPARK_CONF_PREFIX
from storelib.model.errors import ConfigError, StorageAccessError

__all__ = [
    "register",
    "forget",
    "normalize",
    "attach",
    "check_reachable",
    "options_for",
    "resolve",
    "is_local",
    "scheme",
    "filesystem",
    "ship",
    "settings_of",
    "session_settings",
    "ENV_KEY",
    "ANY_ROOT",
    "CONF_PREFIX",
    "OBJECT_STORE_SCHEMES",
    "STANDARD_ENV",
]

#: The environment variable that carries every registered root's options to Spark's Python workers (JSON).
ENV_KEY = "STORELIB_STORAGE_OPTIONS"
#: Spark settings under this prefix are storage options of every object-store root
#: (``spark.storelib.storage.AWS_REGION``).
CONF_PREFIX = "spark.storelib.storage."
#: URI schemes of object stores deltalake and pyarrow both reach.
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl")
#: Environment variables that say how to reach an object store, read once when a root is registered, so
#: that executors elsewhere get what the driver's environment said.
STANDARD_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_APPLICATION_CREDENTIALS",
)

#: The root :func:`register` takes for options of every object-store root (Spark's settings).
ANY_ROOT = "*"

_lock = threading.Lock()
_roots: dict[str, dict[str, str]] = {}
_loaded_env = False


def is_local(root: str) -> bool:
    """Whether a root is a folder on this machine (a plain path or a ``file://`` URI).

    >>> is_local("/tmp/store"), is_local("s3://bucket/store")
    (True, False)
    """
    return "://" not in root or root.startswith("file://")


def scheme(root: str) -> str:
    """The root's URI scheme, ``file`` for a plain path.

    >>> scheme("/tmp/store"), scheme("s3://bucket/store"), scheme("abfss://c@acct.dfs.core.windows.net/s")
    ('file', 's3', 'abfss')
    """
    return root.split("://", 1)[0].lower() if "://" in root else "file"


def _canonical(options: Mapping[str, Any]) -> dict[str, str]:
    """Options with AWS/Azure/Google keys upper-cased (deltalake takes either case; one spelling here)."""
    out = {}
    for key, value in options.items():
        k = str(key)
        if k.lower().startswith(("aws_", "azure_", "google_")):
            k = k.upper()
        out[k] = str(value)
    return out


def _load_env() -> None:
    """Read what the driver shipped (:func:`ship`), once per process (a Spark Python worker's first call)."""
    global _loaded_env
    if _loaded_env:
        return
    _loaded_env = True
    text = os.environ.get(ENV_KEY)
    if not text:
        return
    try:
        shipped = json.loads(text)
    except ValueError:
        return
    for root, options in shipped.items():
        _roots.setdefault(root, _canonical(options))


def register(root: str, options: Mapping[str, Any] | None) -> None:
    """Keep ``options`` for every path under ``root`` in this process (replacing what was kept);
    ``root`` :data:`ANY_ROOT` gives every object-store root options (under its own)."""
    if is_local(root) and root != ANY_ROOT:
        return
    with _lock:
        _load_env()
        _roots[root.rstrip("/")] = _canonical(options or {})
        _filesystem.cache_clear()


def forget(root: str) -> None:
    """Drop what :func:`register` kept for ``root``."""
    with _lock:
        _roots.pop(root.rstrip("/"), None)
        _filesystem.cache_clear()


def options_for(path: str) -> dict[str, str] | None:
    """The options registered for the root ``path`` is under (the longest such root), else None (the
    libraries then read the environment themselves); always None for a local path."""
    if is_local(path):
        return None
    with _lock:
        _load_env()
        best = max((r for r in _roots if path == r or path.startswith(r + "/")), key=len, default=None)
        if best is None and ANY_ROOT not in _roots:
            return None
        return {**_roots.get(ANY_ROOT, {}), **(_roots.get(best, {}) if best is not None else {})}


def settings_of(conf: Mapping[str, str] | None) -> dict[str, str]:
    """The storage options among Spark settings (``spark.storelib.storage.<KEY>``).

    >>> settings_of({"spark.storelib.storage.aws_region": "eu-west-1", "spark.master": "local"})
    {'AWS_REGION': 'eu-west-1'}
    """
    return _canonical({k[len(CONF_PREFIX) :]: v for k, v in (conf or {}).items() if k.startswith(CONF_PREFIX)})


def resolve(
    root: str, storage_options: Mapping[str, Any] | None = None, conf: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """The options a root is reached with: the standard environment variables, then the
    ``spark.storelib.storage.*`` settings in ``conf``, then ``storage_options``, each over the one before
    (None for a local root).

    >>> resolve("s3://b/s", {"AWS_REGION": "x"}, {"spark.storelib.storage.AWS_REGION": "y"})["AWS_REGION"]
    'x'
    >>> resolve("/tmp/store", {"AWS_REGION": "x"}) is None
    True
    """
    if is_local(root):
        return None
    out = {k: os.environ[k] for k in STANDARD_ENV if os.environ.get(k)}
    if "AWS_ENDPOINT_URL" in out and out["AWS_ENDPOINT_URL"].startswith("http://"):
        out.setdefault("AWS_ALLOW_HTTP", "true")  # an http endpoint (a local server) is meant as it is given
    out.update(settings_of(conf))
    out.update(_canonical(storage_options or {}))
    if "AWS_REGION" not in out and "AWS_DEFAULT_REGION" in out:
        out["AWS_REGION"] = out["AWS_DEFAULT_REGION"]
    return out


def normalize(root: str) -> str:
    """A root as the store keeps it: a local path made absolute, a URI without its trailing ``/``; a URI of
    a scheme no library here reaches raises :class:`~storelib.model.errors.ConfigError`.

    >>> normalize("s3://bucket/store/"), normalize("file:///tmp/x/../store")
    ('s3://bucket/store', '/tmp/store')
    >>> normalize("ftp://host/store")                           # doctest: +ELLIPSIS
    Traceback (most recent call last):
    storelib.model.errors.ConfigError: root: 'ftp' is not a storage scheme the store reaches; ...
    """
    if is_local(root):
        return os.path.abspath(root.removeprefix("file://"))
    kind = scheme(root)
    if kind not in OBJECT_STORE_SCHEMES:
        raise ConfigError(
            "root",
            f"{kind!r} is not a storage scheme the store reaches; use a local path or one of "
            f"{', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)}",
            value=root,
        )
    if not urlsplit(root).netloc:
        raise ConfigError("root", "names no bucket or container (s3://BUCKET/path)", value=root)
    return root.rstrip("/")


def attach(root: str, storage_options: Mapping[str, Any] | None = None, conf: Mapping[str, str] | None = None) -> str:
    """Make ``root`` ready to use in this process: normalized (:func:`normalize`), its options resolved and
    registered (a root registered before keeps its options unless new ones are given) and the object store
    reached once (:func:`check_reachable`). Returns the normalized root.

    >>> attach("/tmp/x/../store")
    '/tmp/store'
    """
    root = normalize(root)
    if is_local(root):
        return root
    with _lock:
        _load_env()
        known = root in _roots
    if storage_options is not None or settings_of(conf) or not known:
        register(root, resolve(root, storage_options, conf))
    check_reachable(root)
    return root


def check_reachable(root: str) -> None:
    """One request to the root's bucket: an endpoint that does not answer, credentials it refuses or a
    bucket that does not exist raise :class:`~storelib.model.errors.StorageAccessError` naming the root and
    what to do, before anything is read or written. A local root is not checked.

    >>> check_reachable("/tmp")
    """
    if is_local(root):
        return
    fs, path = filesystem(root)
    bucket = path.split("/", 1)[0]
    try:
        info = fs.get_file_info(bucket)
    except OSError as e:
        text = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        if any(
            w in text
            for w in (
                "AccessDenied",
                "ACCESS_DENIED",
                "Forbidden",
                "403",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
            )
        ):
            hint = "the credentials were refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or storage_options)"
        else:
            hint = (
                "the object store did not answer: check AWS_ENDPOINT_URL (or storage_options), the network, "
                "and AWS_ALLOW_HTTP=true for an http:// endpoint"
            )
        raise StorageAccessError("root", f"cannot reach {root}: {hint} ({text})", value=root) from None
    if info.type.name == "NotFound":
        raise StorageAccessError(
            "root",
            f"the bucket {bucket!r} of {root} does not exist: create it first, or check the URI and AWS_REGION",
            value=root,
        )


def session_settings(spark: Any) -> dict[str, str]:
    """A session's ``spark.storelib.*`` settings: those it started with, and those set on it since
    (``spark.conf.set``; the session's settings hold the ones it started with).

    They are picked out in the JVM: reading every setting through Py4J (hundreds, a round trip each, and an
    exception to end the iteration) took 40-70 ms, at every open of a store.

    >>> spark.conf.set("spark.storelib.flushDiskType", "ASYNC_FLUSH"); session_settings(spark)
    {'spark.storelib.flushDiskType': 'ASYNC_FLUSH'}
    >>> spark.conf.unset("spark.storelib.flushDiskType")
    """
    jconf = getattr(spark.conf, "_jconf", None)
    if jconf is None:  # Spark Connect: its settings come in one request
        return {k: v for k, v in spark.conf.getAll.items() if k.startswith(SPARK_CONF_PREFIX)}
    every = jconf.getAllAsJava()
    keys = spark.sparkContext._jvm.java.lang.String.join("\n", every.keySet()).split("\n")
    return {k: every.get(k) for k in keys if k.startswith(SPARK_CONF_PREFIX)}


def ship(spark: Any) -> bool:
    """Hand every registered root's options to ``spark``'s Python workers (through the environment Spark
    gives each Python function); True when that changed what they get.

    >>> ship(spark)
    False
    """
    with _lock:
        _load_env()
        text = json.dumps(_roots, sort_keys=True) if _roots else None
    env = spark.sparkContext.environment
    if text is None or env.get(ENV_KEY) == text:
        return False
    env[ENV_KEY] = text
    return True


def filesystem(path: str) -> tuple[Any, str]:
    """The pyarrow filesystem for a local path or an object-store URI, reached with :func:`options_for`,
    and the path within it.

    >>> type(filesystem("/tmp/store")[0]).__name__, filesystem("s3://bkt/store/commitlog")[1]
    ('LocalFileSystem', 'bkt/store/commitlog')
    """
    if is_local(path):
        return _local(), path.removeprefix("file://")
    parts = urlsplit(path)
    options = options_for(path) or {}
    fs = _filesystem(scheme(path), parts.netloc, json.dumps(options, sort_keys=True))
    if scheme(path) in ("abfs", "abfss", "az", "adl"):
        container = parts.netloc.split("@", 1)[0]
        return fs, f"{container}{parts.path}".rstrip("/")
    return fs, f"{parts.netloc}{parts.path}".rstrip("/")


@functools.lru_cache(maxsize=1)
def _local():
    """One pyarrow LocalFileSystem for the process: making one costs more than the small reads it serves."""

    return fs.LocalFileSystem()


@functools.lru_cache(maxsize=64)
def _filesystem(kind: str, netloc: str, options_json: str):
    """A pyarrow filesystem per object store and options, made once (its client and connections are reused)."""

    o = json.loads(options_json)
    if kind in ("s3", "s3a"):
        endpoint = o.get("AWS_ENDPOINT_URL") or o.get("AWS_ENDPOINT_URL_S3") or o.get("AWS_ENDPOINT")
        kwargs: dict[str, Any] = {}
        if endpoint:
            split = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            kwargs["endpoint_override"] = split.netloc
            kwargs["scheme"] = split.scheme
        elif o.get("AWS_ALLOW_HTTP", "").lower() == "true":
            kwargs["scheme"] = "http"
        if o.get("AWS_ACCESS_KEY_ID"):
            kwargs.update(
                access_key=o["AWS_ACCESS_KEY_ID"],
                secret_key=o.get("AWS_SECRET_ACCESS_KEY"),
                session_token=o.get("AWS_SESSION_TOKEN"),
            )
        region = o.get("AWS_REGION") or o.get("AWS_DEFAULT_REGION")
        if region:
            kwargs["region"] = region
        if o.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() == "true":
            kwargs["force_virtual_addressing"] = True
        # a request that fails for the network is tried again a few times, then fails: never hangs; a small
        # file is one PUT when it closes (not a multipart upload: three requests)
        kwargs.update(
            connect_timeout=5,
            request_timeout=30,
            allow_delayed_open=True,
            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=4),
        )
        return fs.S3FileSystem(**kwargs)
    if kind in ("abfs", "abfss", "az", "adl"):
        # deltalake reads the AZURE_* variables itself; pyarrow's Azure filesystem does not: it gets them here
        o = {**{k.upper(): v for k, v in os.environ.items() if k.upper().startswith("AZURE_")}, **o}
        account = o.get("AZURE_STORAGE_ACCOUNT_NAME") or netloc.split("@", 1)[-1].split(".", 1)[0]
        where: dict[str, Any] = {}
        endpoint = o.get("AZURE_STORAGE_ENDPOINT") or o.get("AZURE_ENDPOINT")
        if o.get("AZURE_STORAGE_USE_EMULATOR", "").lower() == "true":  # Azurite, as deltalake reaches it
            account = o.get("AZURE_STORAGE_ACCOUNT_NAME") or "devstoreaccount1"
            endpoint = endpoint or "http://127.0.0.1:10000"
        if endpoint:
            split = urlsplit(endpoint)
            auth, scheme_ = split.netloc, split.scheme or "https"
            where = {
                "blob_storage_authority": auth,
                "blob_storage_scheme": scheme_,
                "dfs_storage_authority": auth,
                "dfs_storage_scheme": scheme_,
            }
        return fs.AzureFileSystem(
            account_name=account,
            account_key=o.get("AZURE_STORAGE_ACCOUNT_KEY"),
            sas_token=o.get("AZURE_STORAGE_SAS_TOKEN"),
            **where,
        )
    return fs.FileSystem.from_uri(f"{kind}://{netloc}")[0]  # gs: credentials from the environment
