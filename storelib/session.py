"""Getting a Spark session the way the store needs one, with a clear error when Java is missing.

Under ``spark-submit`` the session it built is used as it is. Started from plain ``python``, the
session reads the repository's ``spark-defaults.conf`` (or ``$STORELIB_SPARK_CONF``) so both ways
run with the same settings.

>>> get_spark("storelib-doc") is spark                 # the active session, as it is
True
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from storelib.delta import location
from storelib.delta.spark_read import parallelism
from storelib.delta.teardown import stat_fields
from storelib.model.errors import JavaNotFoundError, SessionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "get_spark",
    "session_source",
    "default_settings",
    "ensure_session",
    "delta_available",
    "check_java",
    "read_properties_file",
    "parallelism",
    "delta_settings",
    "s3a_settings",
    "hadoop_version",
    "DEFAULTS_FILE",
    "shared_file",
]


def shared_file(name: str) -> Path:
    """A file the project keeps beside the package (``spark-defaults.conf``, the ``sql`` folder): the checkout's
    when storelib runs from one, else the copy an installed wheel put under ``<prefix>/share/storelib``.

    >>> shared_file("sql").name, shared_file("spark-defaults.conf").exists()
    ('sql', True)
    """
    here = Path(__file__).resolve().parents[1] / name
    if here.exists():
        return here
    return Path(sysconfig.get_path("data")) / "share" / "storelib" / name


DEFAULTS_FILE = shared_file("spark-defaults.conf")
#: Spark's logging for the store's sessions: warnings and errors only (no INFO lines before a job's output).
LOG4J2_FILE = Path(__file__).resolve().parent / "log4j2.properties"

#: Settings the store relies on whatever the defaults file says.
REQUIRED = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}

#: Transitive dependencies of delta-spark's jar that Spark already ships (newer): left out of the download.
_SHIPPED_BY_SPARK = (
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.parquet:parquet-hadoop",
    "org.slf4j:slf4j-api",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "com.fasterxml.jackson.core:jackson-databind",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-annotations",
    "org.roaringbitmap:RoaringBitmap",
    "com.google.code.findbugs:jsr305",
)


def delta_settings() -> dict[str, str]:
    """The Spark settings that give a session Delta Spark: the jar matching the installed ``delta-spark``
    and PySpark (what ``configure_spark_with_delta_pip`` asks for, fetched from Maven Central by Spark's own
    resolver), its SQL extension and catalog.

    Delta Spark only reads the store's tables: deltalake is their one committer (``DESIGN.md`` §1).
    Delta's SQL extension hides Spark 4.2's parser-level SQL parameters, so parameters are bound the
    way Spark 3.5-4.1 bound them (``spark.sql.legacy.parameterSubstitution.constantsOnly``).

    >>> delta_settings()["spark.jars.packages"]
    'io.delta:delta-spark_4.2_2.13:4.4.0'
    """

    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return {
        "spark.jars.packages": f"io.delta:delta-spark_{spark_minor}_2.13:{version('delta-spark')}",
        "spark.jars.excludes": ",".join(_SHIPPED_BY_SPARK),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta's SQL parser drops Spark 4.2's parser-level parameter markers (named parameters come out
        # unbound); the analyzer-level binding of earlier Spark versions works with it.
        "spark.sql.legacy.parameterSubstitution.constantsOnly": "true",
    }


def hadoop_version() -> str:
    """The Hadoop version the installed PySpark ships (from its ``hadoop-client-api`` jar).

    >>> hadoop_version().count(".")
    2
    """
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise SessionError("pyspark", f"no hadoop-client-api jar in {jars}: cannot tell which hadoop-aws matches")
    return found[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def s3a_settings(options: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings that let Delta Spark's own ``format("delta")`` reads reach ``s3://`` and ``s3a://`` roots
    through Hadoop's S3A connector: ``hadoop-aws`` of the Hadoop PySpark ships (it brings the AWS SDK bundle
    it names, about 690 MB, from Maven Central) and the endpoint and keys of ``options`` (the standard
    ``AWS_*`` variables where not given). The store's own reads never need them (:mod:`storelib.delta.spark_read`).
    ``get_spark(s3a=True)`` (or ``STORELIB_S3A=1``) adds them.

    >>> s = s3a_settings({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "k"})
    >>> s["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"
    True
    >>> s["spark.hadoop.fs.s3a.endpoint"], s["spark.hadoop.fs.s3a.path.style.access"]
    ('http://127.0.0.1:9000', 'true')
    """
    o = {**{k: v for k, v in os.environ.items() if k.startswith("AWS_")}, **(options or {})}
    out = {
        "spark.jars.packages": f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    endpoint = o.get("AWS_ENDPOINT_URL")
    if endpoint:
        out.update(
            {
                "spark.hadoop.fs.s3a.endpoint": endpoint,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
            }
        )
    if o.get("AWS_ACCESS_KEY_ID"):
        out.update(
            {
                "spark.hadoop.fs.s3a.access.key": o["AWS_ACCESS_KEY_ID"],
                "spark.hadoop.fs.s3a.secret.key": o.get("AWS_SECRET_ACCESS_KEY", ""),
                "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            }
        )
    region = o.get("AWS_REGION") or o.get("AWS_DEFAULT_REGION")
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    return out


def check_java() -> str:
    """Path of the ``java`` Spark will run, or :class:`JavaNotFoundError` saying what to do.

    >>> check_java().endswith("java")
    True
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no 'java' on PATH and JAVA_HOME is not set"
        raise JavaNotFoundError(
            None,
            f"Spark needs Java 17 or newer, but {where}. Install a JDK 17 "
            "(e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME.",
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(None, f"could not run {java}: {e}") from None
    if out.returncode != 0:
        raise JavaNotFoundError(None, f"{java} -version failed: {out.stderr.strip()[:200]}")
    return java


def read_properties_file(path: str | os.PathLike) -> dict[str, str]:
    """``spark-defaults.conf`` format: ``key  value`` per line, ``#`` comments.

    >>> read_properties_file(DEFAULTS_FILE)["spark.sql.parquet.outputTimestampType"]
    'TIMESTAMP_MICROS'
    """
    conf = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        conf[key.strip()] = value.strip()
    return conf


def default_settings() -> dict[str, str]:
    """The settings of the defaults file a new session starts with: ``$STORELIB_SPARK_CONF``, else the
    repository's ``spark-defaults.conf`` (none when neither exists).

    >>> default_settings()["spark.sql.session.timeZone"]
    'UTC'
    """
    defaults = Path(os.environ.get("STORELIB_SPARK_CONF", DEFAULTS_FILE))
    return read_properties_file(defaults) if defaults.exists() else {}


def session_source(
    spark: "SparkSession | None" = None,
) -> "tuple[SparkSession | Callable[[], SparkSession], dict[str, str] | None]":
    """What a store opened with ``spark`` works with, and the settings it reads ``spark.storelib.*`` from:
    the session given, else the active one (both made ready by :func:`ensure_session`, their own
    settings), else :func:`get_spark` itself, called when the store first needs Spark, with the
    defaults file's settings meanwhile. Look-ups, pulls and offsets never need it.

    >>> session_source(spark)[0] is spark
    True
    """
    if spark is None and "pyspark.sql" not in sys.modules:  # no session can be active: PySpark is not imported
        return get_spark, default_settings()
    from pyspark.sql import SparkSession

    active = spark or SparkSession.getActiveSession()
    if active is not None:
        return ensure_session(active), None
    return get_spark, default_settings()


def get_spark(
    app_name: str = "storelib",
    conf: Mapping[str, str] | None = None,
    *,
    s3a: bool | None = None,
) -> "SparkSession":
    """The active Spark session, or a new one with the store's defaults plus ``conf`` (and, with ``s3a`` or
    ``STORELIB_S3A=1``, :func:`s3a_settings`)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return ensure_session(active)
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = delta_settings()
    settings.update(default_settings())
    settings.update(conf or {})
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in java_options or "storelib/log4j2.properties" in java_options:
        java_options = " ".join(o for o in java_options.split() if "log4j2.configurationFile" not in o)
        settings["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j2.configurationFile=file:{LOG4J2_FILE} {java_options}".strip()
        )
    if s3a if s3a is not None else os.environ.get("STORELIB_S3A", "").lower() in ("1", "true", "yes"):
        extra = s3a_settings()
        settings["spark.jars.packages"] += "," + extra.pop("spark.jars.packages")
        settings.update({k: v for k, v in extra.items() if k not in (conf or {})})
    given = [p for p in settings["spark.jars.packages"].split(",") if p and not p.startswith("io.delta:delta-spark")]
    settings["spark.jars.packages"] = ",".join([delta_settings()["spark.jars.packages"], *given])
    settings.update(REQUIRED)
    settings["spark.app.name"] = app_name
    settings.update(console_progress(sys.stderr.isatty(), conf or {}))
    resolving = settings["spark.jars.packages"] + "|" + settings.get("spark.jars.excludes", "")
    kept = resolved_jars(resolving)
    if kept:  # resolved by an earlier start: no Ivy resolution (and no report of it on stderr)
        del settings["spark.jars.packages"]
        settings["spark.jars"] = ",".join(j for j in (settings.get("spark.jars"), *kept) if j)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    submitted_log_settings()
    spark = builder.getOrCreate()
    # a session this process made: its daemons serve no one else (atexit runs this before teardown's handler)
    atexit.register(end_python_daemons)
    spark.sparkContext.setLogLevel(os.environ.get("STORELIB_SPARK_LOG_LEVEL") or "ERROR")
    if not kept:
        remember_jars(resolving, spark.sparkContext.getConf().get("spark.jars", ""))
    return ensure_session(spark)


def submitted_log_settings() -> bool:
    """Under ``spark-submit`` (the driver's JVM is already running, started from any folder), point its logging
    at :data:`LOG4J2_FILE` before the session starts, unless the user named log settings of their own; True
    when done. ``spark-defaults.conf`` names the file by a path relative to the repository, which only a
    start from its root finds; outside it, Spark's own defaults hold until here.

    >>> submitted_log_settings()  # a plain python process: get_spark() starts the JVM with the file itself
    False
    """
    from pyspark import SparkContext

    if "PYSPARK_GATEWAY_PORT" not in os.environ or SparkContext._active_spark_context is not None:
        return False
    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    named = jvm.java.lang.System.getProperty("log4j2.configurationFile") or ""  # type: ignore[union-attr]
    ours = ("classpath:", "storelib/log4j2.properties")
    if named and not all(p.startswith(ours[0]) or p.endswith(ours[1]) for p in named.split(",")):
        return False  # the user's own settings
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(  # type: ignore[union-attr]
        jvm.java.net.URI.create(LOG4J2_FILE.as_uri())  # type: ignore[union-attr]
    )
    return True


def end_python_daemons(timeout_s: float = 2.0, jvm: int | None = None) -> int:
    """End the Python worker daemons of this machine's Spark driver (SIGTERM: a daemon ends its idle workers
    with it, quietly, and removes its socket); how many were ended. Runs at exit, before Spark stops itself:
    Spark closes its idle workers' sockets first and signals the daemons after, and a worker that sees its
    socket close in between prints a ``BrokenPipeError`` traceback on the job's stderr (about one run in
    four here, from the daemons that plan the ``rocketmq`` source's reads). Executors elsewhere end theirs.
    :func:`get_spark` registers it for the sessions it starts; a script that starts its own session may call
    it last (never where the driver's JVM serves other notebooks, as on Databricks).

    ``jvm``: the driver JVM's process id (None: the running session's). Only a process's last act: the
    session's Python work fails from then on.

    >>> end_python_daemons(0.1, jvm=os.getpid())  # this process started no daemon itself (its JVM did)
    0
    """
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None or not os.path.isdir("/proc"):
        return 0
    if jvm is None:
        proc = getattr(SparkContext._gateway, "proc", None)
        jvm = proc.pid if proc is not None else os.getppid()  # under spark-submit the JVM started this interpreter
    daemons = [pid for pid in _children(jvm) if b"pyspark.daemon" in _cmdline(pid)]
    for pid in daemons:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in daemons):
        time.sleep(0.01)
    return len(daemons)


def _children(parent: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and stat_fields(f"/proc/{e}/stat")[1:2] == [str(parent)]]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    return stat_fields(f"/proc/{pid}/stat")[:1] not in ([], ["Z"])


def console_progress(terminal: bool, conf: Mapping[str, str]) -> dict[str, str]:
    """Spark's progress bar (``[Stage 3:=====>   (2 + 2) / 4]`` on stderr, for a stage past half a second) where
    stderr is a terminal, unless ``conf`` says otherwise; nothing is changed for a pipe or a log file.

    >>> console_progress(True, {}), console_progress(False, {})
    ({'spark.ui.showConsoleProgress': 'true'}, {})
    >>> console_progress(True, {"spark.ui.showConsoleProgress": "false"})
    {}
    """
    return {"spark.ui.showConsoleProgress": "true"} if terminal and "spark.ui.showConsoleProgress" not in conf else {}


def _jars_record(resolving: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "storelib"
    return cache / f"jars-{hashlib.sha256(resolving.encode()).hexdigest()[:16]}.txt"


def resolved_jars(resolving: str) -> list[str]:
    """The jar files an earlier session resolved for ``resolving`` (its packages and excludes), when every one
    is still on the disk; ``[]`` otherwise (the session then resolves them with Ivy, once).

    >>> resolved_jars("org.example:never-resolved:1.0|")
    []
    """
    try:
        jars = _jars_record(resolving).read_text().split()
    except OSError:
        return []
    return jars if jars and all(Path(j.removeprefix("file:")).is_file() for j in jars) else []


def remember_jars(resolving: str, jars: str) -> None:
    """Keep the jar files Ivy resolved for ``resolving`` (a session's ``spark.jars``), for :func:`resolved_jars`.

    >>> remember_jars("org.example:kept:1.0|", ""); resolved_jars("org.example:kept:1.0|")
    []
    """
    local = [j for j in jars.split(",") if j.startswith(("file:", "/")) and j.endswith(".jar")]
    if not local:
        return
    record = _jars_record(resolving)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("\n".join(local) + "\n")
    except OSError:  # a read-only home: Ivy resolves at each start, as before
        pass


#: Runtime SQL settings the store relies on, set on any session it is given.
RUNTIME = {
    **REQUIRED,
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.legacy.parameterSubstitution.constantsOnly": "true",
}
_CHECKED: set[str] = set()


def ensure_session(spark: "SparkSession") -> "SparkSession":
    """Give a session, wherever it was made, what the store needs, or say what is missing
    (:class:`~storelib.model.errors.SessionError`), once per session:

    * Spark's Python workers must import storelib: on a local master they run this interpreter (a
      session built by ``SparkSession.builder`` starts ``python3`` from ``PATH``, which may lack the
      project's packages); elsewhere a one-task job checks that they can;
    * the runtime settings in :data:`RUNTIME`;
    * the ``rocketmq`` data source, registered.

    >>> ensure_session(spark) is spark
    True
    """
    sc = spark.sparkContext
    for key, value in RUNTIME.items():
        spark.conf.set(key, value)
    if sc.applicationId not in _CHECKED:
        chosen = os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python")
        if (sc.master or "").startswith("local") and not chosen and sc.pythonExec != sys.executable:
            sc.pythonExec = sys.executable  # workers of this machine, no interpreter named: this one
        elif sc.pythonExec != sys.executable:
            _check_workers(spark)
        _CHECKED.add(sc.applicationId)
        settings = location.settings_of(location.session_settings(spark))
        if settings:
            location.register(location.ANY_ROOT, settings)
    location.ship(spark)  # before the source: its workers get the environment it is registered with
    from storelib.datasource import register  # PySpark's data source classes: only once a session is there

    register(spark)  # after pythonExec: the source's planning workers run the interpreter it names
    return spark


def delta_available(spark: "SparkSession") -> bool:
    """Whether the session can read Delta tables through Delta Spark (its jar is on the JVM's classpath).

    >>> delta_available(spark)
    True
    """
    try:
        if spark._jvm is None:  # a Spark Connect session (no JVM here to ask)
            return False
        spark._jvm.org.apache.spark.util.Utils.classForName("org.apache.spark.sql.delta.DeltaLog", True, False)
        return True
    except Exception:  # not on the classpath, or a Spark Connect session (no JVM here to ask)
        return False


def _check_workers(spark: "SparkSession") -> None:
    """One task importing storelib on an executor, or :class:`SessionError` with the reason."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    def probe(batches):
        import storelib.encoding.tags  # noqa: F401  (and through it pyarrow, numpy)

        yield from batches

    try:
        spark.range(1, numPartitions=1).mapInArrow(probe, "id long").collect()
    except (PySparkException, Py4JError) as e:
        text = str(e)
        reason = next(
            (line.strip() for line in text.splitlines() if "Error:" in line and "Traceback" not in line),
            text.splitlines()[0] if text else type(e).__name__,
        )
        raise SessionError(
            "spark.pyspark.python",
            f"Spark's Python workers cannot import storelib ({reason[:200]}); "
            "set PYSPARK_PYTHON or spark.pyspark.python to an interpreter with storelib installed, "
            "or start the session with storelib.session.get_spark()",
        ) from None
