"""Logs of the node daemon (`node.daemon.service`) on stderr: text for people, JSON for machines.

``log_format: auto`` (the default) writes text lines when stderr is a terminal and one
JSON object per line otherwise (a service manager, a pipe, a file); ``json`` and
``text`` force one. Every part of the daemon logs through `event` on the ``odf.node``
logger, with structured fields; a dataset is named by `dataset_fields`: its DID
(``dataset``, always in JSON) and its alias (``alias``), which text lines show instead
of the DID (both at debug level).

py-libp2p's own log lines are its internals (one unreachable peer is four "Failed to
open TCP stream" errors): they are shown only at debug level, as debug lines, and the
daemon logs one line of its own about what they mean (`node.daemon.watch`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from storage.workspace import Workspace

__all__ = [
    "LIBP2P_LOGGERS",
    "NOISY_LOGGERS",
    "dataset_fields",
    "event",
    "log",
    "resolve_format",
    "setup_logging",
]

log = logging.getLogger("odf.node")

#: Loggers of py-libp2p and friends lowered to WARNING (to DEBUG at debug level).
NOISY_LOGGERS: Final = (
    "libp2p",
    "multiaddr",
    "async_service",
    "aiohttp.access",
    "asyncio",
    "trio",
)
#: Loggers of py-libp2p's internals: their records are shown as debug lines, at debug
#: level only, whatever level they were logged at.
LIBP2P_LOGGERS: Final = ("libp2p", "multiaddr", "async_service")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_fields(record))
        if record.exc_info and record.exc_info[0] is not None:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def _text_value(value: Any) -> str:
    """A field value as a person reads it: bare unless it holds spaces or quotes."""
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if isinstance(value, bool | int | float):
        return str(value)
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


class _TextFormatter(logging.Formatter):
    """``2026-11-29 08:01:02 info  message  key=value ...`` (UTC).

    A dataset shows as its alias; its DID only when ``verbose`` (debug level) or when
    it has no alias. Fields without a value are left out. ``verbose`` also names the
    logger of lines that are not the daemon's own.
    """

    def __init__(self, *, verbose: bool) -> None:
        super().__init__()
        self._verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.created))
        line = f"{stamp} {record.levelname.lower():<7} "
        if self._verbose and record.name != log.name:
            line += f"[{record.name}] "  # at debug level, whose line this is
        line += record.getMessage()
        parts = [f"{k}={_text_value(v)}" for k, v in self._named(_fields(record)).items()]
        if parts:
            line += "  " + " ".join(parts)
        if record.exc_info and record.exc_info[0] is not None:
            line += "\n" + self.formatException(record.exc_info)
        return line

    def _named(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with ``dataset`` showing the alias, and empty values left out."""
        alias = fields.pop("alias", None)
        if alias and "dataset" in fields:
            did = fields["dataset"]
            fields["dataset"] = alias
            if self._verbose:
                fields = {**fields, "did": did}
        elif alias:
            fields["alias"] = alias
        return {k: v for k, v in fields.items() if v is not None and v != [] and v != ""}


def _is_libp2p(name: str) -> bool:
    return any(name == n or name.startswith(n + ".") for n in LIBP2P_LOGGERS)


def _demote_libp2p(verbose: bool) -> logging.Filter:
    """A handler filter: py-libp2p's records dropped, or relabelled debug if ``verbose``."""

    def check(record: logging.LogRecord) -> bool:
        if not _is_libp2p(record.name):
            return True
        if not verbose:
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True

    f = logging.Filter()
    f.filter = check  # type: ignore[method-assign]
    return f


def resolve_format(fmt: str, stream: Any) -> str:
    """``json`` or ``text``: ``auto`` is text when ``stream`` is a terminal, else JSON."""
    if fmt != "auto":
        return fmt
    isatty = getattr(stream, "isatty", None)
    try:
        return "text" if isatty is not None and isatty() else "json"
    except ValueError:  # a closed stream
        return "json"


def setup_logging(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    """Logs on ``stream`` (stderr) at ``level``, as ``fmt`` says (see `resolve_format`).

    py-libp2p's internals (`LIBP2P_LOGGERS`) are shown only at debug level, as debug
    lines; the other `NOISY_LOGGERS` are set to WARNING unless ``level`` is debug.
    """
    stream = stream or sys.stderr
    verbose = level == "debug"
    handler = logging.StreamHandler(stream)
    if resolve_format(fmt, stream) == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter(verbose=verbose))
    handler.addFilter(_demote_libp2p(verbose))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)
    # multiaddr logs at debug from inside `Multiaddr.__str__`, i.e. while a handler that
    # formats a record holding a multiaddr has its lock: at DEBUG, two threads logging
    # through two handlers deadlock on each other's lock. Its debug lines carry nothing.
    logging.getLogger("multiaddr").setLevel(logging.WARNING)
    # py-libp2p's import detaches its logger (no handler, propagate off), so its records
    # went to Python's last-resort handler as bare lines in the middle of the log.
    # Imported first so that its import-time setup cannot undo this later.
    import libp2p  # noqa: F401

    libp2p_log = logging.getLogger("libp2p")
    libp2p_log.handlers.clear()
    libp2p_log.propagate = True


def dataset_fields(ws: Workspace, did: DatasetId, name: str | None = None) -> dict[str, Any]:
    """Log fields naming a dataset: ``dataset`` (its DID) and ``alias``.

    The alias is the workspace's (a dataset held here), else ``name`` (the name its
    publisher signed into a head record), else none.
    """
    from fbs.errors import OdfError

    alias: str | None
    try:
        alias = ws.resolve(did).alias
    except (OdfError, OSError):
        alias = name
    return {"dataset": did.to_did_odf(), "alias": alias}


def event(level: int, msg: str, **fields: Any) -> None:
    """Log ``msg`` on ``odf.node`` with structured ``fields``."""
    log.log(level, msg, extra={"fields": fields})
