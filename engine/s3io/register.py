"""Registering ``odf_s3`` with a session, its module pickled by value for the executors.

A Python data source is registered in one session (a request's child session: the root
session's sources would be copied into children made later, which then cannot register
the name again) and found by name there. A read looks it up in the reading session, a
write in the JVM thread's active session: `active` makes the writing session that for
the duration of the write.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["active", "register_source"]

_LOCK: Final = threading.Lock()


def register_source(session: SparkSession) -> str:
    """Make ``odf_s3`` readable and writable in ``session``; returns its name.

    The executors import nothing of this project: cloudpickle ships the data source's
    module (`engine.s3io.executor`) whole.
    """
    from pyspark import cloudpickle
    from pyspark.errors import AnalysisException

    from engine.s3io import executor

    with _LOCK:
        cloudpickle.register_pickle_by_value(executor)  # type: ignore[no-untyped-call]
        try:
            session.dataSource.register(executor.OdfS3Source)
        except AnalysisException as e:
            if e.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
                raise
    return executor.SOURCE_NAME


@contextlib.contextmanager
def active(session: SparkSession) -> Iterator[None]:
    """Make ``session`` the active one of this thread's JVM thread, then clear it."""
    jvm: Any = session.sparkContext._jvm
    jsession: Any = session._jsparkSession
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
    try:
        yield
    finally:
        jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
