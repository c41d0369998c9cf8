"""Starting Spark: pyspark and Java are checked first, and a missing one is named with its fix.

pyspark talks to a JVM; without Java it fails with a gateway error deep inside ``SparkSession``, and
without pyspark (or the pyarrow and pandas its vectorised UDFs need) with a bare ``ImportError``.
:func:`require_pyspark` and :func:`find_java` turn both into one clear message that names the fix.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_dedup.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JAVA_FIX", "PYSPARK_FIX", "SparkSetupError", "check_master", "command_session", "find_java", "require_pyspark",
    "session", "spark_errors", "spark_reason",
]

#: How to install what the Spark engine needs, quoted in every error about it.
PYSPARK_FIX = 'pip install "rag-dedup[spark]"'
JAVA_FIX = "apt-get install openjdk-17-jre-headless"


def require_pyspark() -> None:
    """Import pyspark and the Arrow/pandas modules its vectorised stages use.

    Raises:
        ImportError: One of them is missing; the message names it and ``pip install "rag-dedup[spark]"``.
    """
    for module in ("pyspark", "pyarrow", "pandas"):
        try:
            __import__(module)
        except ImportError as e:
            raise ImportError(f"the Spark engine needs {module}, which is not installed; {PYSPARK_FIX}") from e


def find_java() -> Path:
    """The Java home pyspark will use: ``$JAVA_HOME``, else the one of ``java`` on PATH.

    Raises:
        SparkSetupError: ``JAVA_HOME`` has no ``bin/java``, or there is no ``java`` at all.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        if not (Path(home) / "bin" / "java").is_file():
            raise SparkSetupError(
                f"JAVA_HOME={home!r} has no bin/java; point JAVA_HOME at a Java 17 installation, unset it, "
                f"or install one with: {JAVA_FIX}"
            )
        return Path(home)
    java = shutil.which("java")
    if java is None:
        raise SparkSetupError(f"Spark needs Java and no java is on PATH (JAVA_HOME is unset); install it with: {JAVA_FIX}")
    return Path(java).resolve().parent.parent


#: The master URLs Spark accepts (``SparkContext.createTaskScheduler`` and ``SparkSubmit``): local ones
#: with a thread count of at least 1 (and maybe a failure count), a local cluster, a standalone master, YARN
#: and Kubernetes.
_MASTER = re.compile(
    r"local(?:\[(?:\*|[1-9][0-9]*)(?:\s*,\s*[0-9]+)?\])?"
    r"|local-cluster\[\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*\]"
    r"|spark://\S+|k8s://\S+|yarn"
)


def check_master(master: str) -> None:
    """Refuse a master URL Spark would refuse, before a JVM is started for it (Spark prints its own Java
    stack trace and then the gateway fails with an error that says nothing of the master).

    Raises:
        ValueError: ``master`` is not ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``,
            ``local-cluster[W,C,M]``, ``spark://HOST:PORT``, ``k8s://URL`` or ``yarn``.
    """
    if not _MASTER.fullmatch(master):
        raise ValueError(
            f"Spark master {master!r} is not one Spark accepts: local, local[N] (N >= 1 threads), local[*], "
            "spark://HOST:PORT, k8s://URL or yarn"
        )


def session(
    master: str | None = "local[2]", *, shuffle_partitions: int | None = None, log_level: str | None = None, **conf: Any
) -> SparkSession:
    """Get or start a SparkSession at ``master``, with Java and pyspark checked first.

    Args:
        master: The Spark master URL (``local[2]``, ``spark://host:7077``, ``yarn``, ...); None: the
            one ``spark-submit`` or ``spark-defaults.conf`` set.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; default: 4 per local core, else Spark's.
        log_level: The JVM's log level once it is up (``"FATAL"``, ``"ERROR"``, ``"WARN"``, ...); None:
            Spark's (WARN). See :func:`command_session`.
        **conf: More Spark settings (dots written as ``__``: ``spark__driver__memory="4g"``).

    With a local master and ``PYSPARK_PYTHON`` unset, Spark's Python workers run this interpreter
    (``sys.executable``: it sets ``PYSPARK_PYTHON``), not the ``python3`` first on ``PATH``, which need
    not have rag-dedup (a command run by its full path, from cron or pipx). On a cluster the executors'
    Python is the cluster's setting.

    Raises:
        ValueError: ``master`` is not a master URL (:func:`check_master`).
        ImportError: pyspark is not installed.
        SparkSetupError: No Java, or the JVM did not start.
    """
    if master is not None:
        check_master(master)
    require_pyspark()
    os.environ["JAVA_HOME"] = str(find_java())
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("rag-dedup")
    if master is not None:
        builder = builder.master(master)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if shuffle_partitions is None and master is not None and master.startswith("local[") and master.endswith("]"):
        cores = master[len("local[") : -1].split(",")[0]
        shuffle_partitions = 4 * ((os.cpu_count() or 1) if cores == "*" else int(cores))
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for name, value in conf.items():
        builder = builder.config(name.replace("__", "."), str(value))
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # pyspark raises its own runtime errors when the JVM gateway does not come up
        raise SparkSetupError(
            f"Spark did not start at master {master!r} ({type(e).__name__}: {str(e).strip().splitlines()[0][:300]}); "
            f"check that Java 17 works (java -version), or install it with: {JAVA_FIX}"
        ) from e
    if log_level is not None:
        spark.sparkContext.setLogLevel(log_level)
    return spark


@contextmanager
def command_session(master: str | None, *, log_level: str | None = "FATAL") -> Iterator[SparkSession]:
    """The session a command runs its job in, as :func:`session` starts it, stopped when the block ends.

    A session that was already running (a notebook's, a test's) is used as it is: not stopped, its log
    level not changed. One started here gets ``log_level`` (default FATAL: the command's one line about a
    failed job stands for Spark's task-failure ERROR lines) and is stopped before an exception leaves the
    block, so the JVM's shutdown, and any line it logs, comes before the command's report, not after it.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    running = SparkSession.getActiveSession()
    spark = session(master, log_level=None if running is not None else log_level)
    try:
        yield spark
    finally:
        if running is None:
            spark.stop()


def spark_errors() -> tuple[type[BaseException], ...]:
    """The exceptions Spark raises from a job or a read: pyspark's own (``AnalysisException``,
    ``PythonException``, ...) and py4j's (a Java exception pyspark does not convert)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def spark_reason(e: BaseException) -> str:
    """One line for an error Spark raised: the message of the innermost Java cause, else the first line
    of the message (the JVM stack trace and the Python worker's traceback left out)."""
    java = getattr(e, "java_exception", None)
    if java is not None:
        cause = java
        while cause.getCause() is not None:
            cause = cause.getCause()
        text = str(cause.getMessage() or cause.toString())
    else:
        text = str(e)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # A Python worker's failure: its message says "see the stack trace below"; the exception is the
    # traceback's last line.
    raised = [line for line in lines if _RAISED.match(line)]
    if any(line.startswith("Traceback (most recent call last)") for line in lines) and raised:
        return raised[-1]
    return lines[0] if lines else type(e).__name__


#: A traceback's last line: the exception's class (maybe dotted), a colon, the message.
_RAISED = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)")
