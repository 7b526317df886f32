"""A long-lived SparkSession configured like kamu's Spark engine.

The engine server creates one session at start-up (the JVM start costs ~7 s cold) and
runs every request in a fresh child session (`request_session`): child sessions share
the SparkContext and its caches but keep temp views apart, so concurrent requests
cannot see each other's inputs.

Settings that make outputs comparable with kamu's Spark engine: ANSI mode on, session
time zone UTC, Parquet timestamps written as ``TIMESTAMP_MILLIS`` (UTC-adjusted INT64).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from engine.errors import EngineConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_DRIVER_MEMORY",
    "DEFAULT_JIT_THRESHOLD_SCALING",
    "DEFAULT_MASTER",
    "DEFAULT_SHUFFLE_PARTITIONS",
    "ENGINE_NAME",
    "SESSION_SQL_CONF",
    "SparkSettings",
    "create_session",
    "engine_identity",
    "request_session",
]

#: Name of this engine in `TransformSql.engine` and in the identity string.
ENGINE_NAME: Final = "spark"
#: Spark master used when none is given (all local cores).
DEFAULT_MASTER: Final = "local[*]"
#: Driver heap; the JVM's RSS is ~0.4 GB idle and below 1 GB for small data.
DEFAULT_DRIVER_MEMORY: Final = "1g"
#: Shuffle partitions: ODF transforms usually see small slices of new data.
DEFAULT_SHUFFLE_PARTITIONS: Final = 4
#: The driver JVM's ``-XX:CompileThresholdScaling`` (1.0: the JVM's own thresholds, and no
#: flag is passed). A 1M-row window pull runs much of Spark's driver code (analysis,
#: planning, closure cleaning, task serialization) a few hundred times, and with the JVM's
#: thresholds every pull pushes a new batch of those methods into compilation: after 10
#: pulls the JIT compiler threads still take 0.5-0.9 of a pull's 1.3-1.7 CPU s (per-thread
#: CPU). Scaled thresholds cut that (x30: 0.1 s) but leave task code less optimized for
#: longer: per pull the tasks and driver calls cost 0.35 s more, and one 10M-row run took
#: 3x the task CPU (`scripts/bench/streaming.py --jit-scaling`, 2 runs each, interleaved).
#: So the default stays the JVM's.
DEFAULT_JIT_THRESHOLD_SCALING: Final = 1.0
#: Accepted range of the scaling (the JVM takes 0 as "never compile").
MIN_JIT_THRESHOLD_SCALING: Final = 0.01
MAX_JIT_THRESHOLD_SCALING: Final = 1000.0
#: Longest accepted master URL / config value (defence against odd CLI input).
MAX_SETTING_LEN: Final = 1024

_MASTER_RE: Final = re.compile(
    r"local(\[(\*|\d{1,4})(,\d{1,4})?\])?|local-cluster\[\d{1,4},\d{1,4},\d{1,6}\]"
    r"|(spark|k8s)://\S+|yarn"
)
_MEMORY_RE: Final = re.compile(r"\d{1,6}[kmgt]?", re.IGNORECASE)

#: Per-session SQL settings: applied to the root session and to every request session.
SESSION_SQL_CONF: Final[dict[str, str]] = {
    "spark.sql.ansi.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.parquet.compression.codec": "snappy",
    # Read Parquet INT96 / legacy dates as-is; kamu data never has them, but a
    # rebase exception would turn a readable file into an engine error.
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}

# Log4j2 settings written to a temp file at start-up: warnings and errors only, on stderr.
_LOG4J2_PROPERTIES: Final = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkSettings:
    """How to start the engine's SparkSession.

    Attributes:
        master: Spark master URL: ``local[*]``, ``local[2]``, ``spark://127.0.0.1:7077`` ...
        driver_memory: driver heap size (``512m``, ``1g`` ...).
        shuffle_partitions: ``spark.sql.shuffle.partitions``.
        driver_host: address the driver binds to and advertises (loopback by default;
            set a reachable address when executors run on other machines).
        jit_threshold_scaling: the driver JVM's JIT threshold scaling (see
            `DEFAULT_JIT_THRESHOLD_SCALING`; 1.0: the JVM's defaults).
        extra_conf: further ``spark.*`` settings, applied last.
    """

    master: str = DEFAULT_MASTER
    driver_memory: str = DEFAULT_DRIVER_MEMORY
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS
    driver_host: str = "127.0.0.1"
    jit_threshold_scaling: float = DEFAULT_JIT_THRESHOLD_SCALING
    extra_conf: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if len(self.master) > MAX_SETTING_LEN or not _MASTER_RE.fullmatch(self.master):
            raise EngineConfigError(f"invalid Spark master URL: {self.master!r}")
        if not _MEMORY_RE.fullmatch(self.driver_memory):
            raise EngineConfigError(f"invalid driver memory: {self.driver_memory!r}")
        if not (1 <= self.shuffle_partitions <= 10_000):
            raise EngineConfigError(f"shuffle_partitions out of range: {self.shuffle_partitions}")
        scaling = self.jit_threshold_scaling
        if not MIN_JIT_THRESHOLD_SCALING <= scaling <= MAX_JIT_THRESHOLD_SCALING:
            raise EngineConfigError(f"jit_threshold_scaling out of range: {scaling}")
        for key, value in self.extra_conf:
            if not key.startswith("spark.") or len(key) + len(value) > MAX_SETTING_LEN:
                raise EngineConfigError(f"invalid Spark setting {key!r}")

    def conf(self, log_config: Path | None = None) -> dict[str, str]:
        """All ``spark.*`` settings passed to the session builder."""
        conf = {
            "spark.app.name": "odf-engine-spark",
            "spark.master": self.master,
            "spark.driver.memory": self.driver_memory,
            "spark.driver.host": self.driver_host,
            "spark.driver.bindAddress": self.driver_host,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.adaptive.enabled": "true",
            # Spark writes _SUCCESS markers and .crc files next to part files; we move
            # the single part file out and delete the rest, so skip the markers.
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
            **SESSION_SQL_CONF,
        }
        if log_config is not None:
            conf["spark.driver.extraJavaOptions"] = (
                f"-Dlog4j2.configurationFile=file:{log_config} -XX:+UseSerialGC"
            )
            if self.jit_threshold_scaling != 1.0:
                conf["spark.driver.extraJavaOptions"] += (
                    f" -XX:CompileThresholdScaling={self.jit_threshold_scaling:g}"
                )
        from engine.s3io.settings import session_conf

        conf.update(session_conf({**conf, **dict(self.extra_conf)}))
        conf.update(self.extra_conf)
        return conf


def _write_log_config() -> Path:
    fd, name = tempfile.mkstemp(prefix="odf-engine-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_LOG4J2_PROPERTIES)
    return Path(name)


def create_session(settings: SparkSettings | None = None) -> SparkSession:
    """Start (or return the already running) SparkSession of this process.

    Spark allows one SparkContext per process: a second call returns the first session
    whatever its settings.

    Raises:
        EngineConfigError: for invalid settings.
    """
    from pyspark.sql import SparkSession

    settings = settings or SparkSettings()
    # Without it Spark resolves the hostname, warns that it maps to loopback and may
    # bind to another interface.
    os.environ.setdefault("SPARK_LOCAL_IP", settings.driver_host)
    builder = SparkSession.builder
    log_config = _write_log_config()
    try:
        for key, value in settings.conf(log_config).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    finally:
        # log4j reads its configuration once, while the JVM starts.
        log_config.unlink(missing_ok=True)
    session.sparkContext.setLogLevel("ERROR")
    # PySpark logs every captured SQL error with its JVM stack trace; the engine reports
    # query errors to the caller instead.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return session


def request_session(root: SparkSession) -> SparkSession:
    """A child session for one request: own temp views, shared context and caches."""
    child = root.newSession()
    for key, value in SESSION_SQL_CONF.items():
        child.conf.set(key, value)
    return child


def odf_node_version() -> str:
    """The installed odf-node version ("unknown" when running from a bare checkout)."""
    try:
        return importlib.metadata.version("odf-node")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def engine_identity(session: SparkSession | None = None) -> str:
    """Human-readable engine identity, e.g. ``spark (odf-node 0.1.0, Apache Spark 4.3.0)``.

    Without a session the Spark version is the installed PySpark's.
    """
    if session is not None:
        spark_version = session.version
    else:
        # The installed distribution's version, not `pyspark.__version__`: an up-to-date
        # `odf pull` checks the identity without importing PySpark (0.2 s).
        spark_version = importlib.metadata.version("pyspark")
    return f"{ENGINE_NAME} (odf-node {odf_node_version()}, Apache Spark {spark_version})"
