"""Registering ``odf_s3`` with a session, its module pickled by value for the executors.

Python data sources are looked up by name in the session that reads (a request's child
session) and, for writes, in the process's first session too; a child session made after
the first session registered a name can neither see that name nor register it again. So
each session gets the source under a name of its own, ``odf_s3_<n>``, registered in it
and in the first session (each registration keeps the pickled source in the JVM: a few
KiB per request session that reads or writes S3).
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register_source"]

_LOCK: Final = threading.Lock()
_COUNTER: Final = itertools.count(1)
_NAMES: dict[str, str] = {}


def register_source(session: SparkSession) -> str:
    """Make ``odf_s3`` readable and writable in ``session``; returns its name there.

    The executors import nothing of this project: cloudpickle ships the data source's
    module (`engine.s3io.executor`) whole.
    """
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    from engine.s3io import executor

    jsession: Any = session._jsparkSession
    key = str(jsession.sessionUUID())
    with _LOCK:
        name = _NAMES.get(key)
        if name is not None:
            return name
        cloudpickle.register_pickle_by_value(executor)  # type: ignore[no-untyped-call]
        name = f"{executor.SOURCE_NAME}_{next(_COUNTER)}"
        source = type(
            f"OdfS3Source_{name}",
            (executor.OdfS3Source,),
            {"name": classmethod(lambda cls: name)},
        )
        first = getattr(SparkSession, "_instantiatedSession", None)
        session.dataSource.register(source)
        if first is not None and first is not session:
            first.dataSource.register(source)
        _NAMES[key] = name
        return name
