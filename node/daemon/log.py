"""Logs of the node daemon (`node.daemon.service`): one JSON object per line on stderr.

``log_format: text`` gives ``key=value`` lines instead. Every part of the daemon logs
through `event` on the ``odf.node`` logger, with structured fields; py-libp2p's chatty
loggers (`NOISY_LOGGERS`) are lowered to WARNING and formatted like the rest.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

__all__ = ["NOISY_LOGGERS", "event", "log", "setup_logging"]

log = logging.getLogger("odf.node")

#: Loggers of py-libp2p and friends lowered to WARNING.
NOISY_LOGGERS: Final = (
    "libp2p",
    "multiaddr",
    "async_service",
    "aiohttp.access",
    "asyncio",
    "trio",
)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={json.dumps(record.getMessage())}",
        ]
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for k, v in fields.items():
                text = v if isinstance(v, int | float) else json.dumps(str(v))
                parts.append(f"{k}={text}")
        line = " ".join(parts)
        if record.exc_info and record.exc_info[0] is not None:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _quiet_libp2p(record: logging.LogRecord) -> bool:
    """Whether to emit ``record``: py-libp2p's only from WARNING up."""
    return record.levelno >= logging.WARNING or not record.name.startswith("libp2p")


def setup_logging(level: str = "info", fmt: str = "json", stream: Any = None) -> None:
    """Structured logs on ``stream`` (stderr): ``json`` lines or ``text`` key=value.

    py-libp2p's loggers (`NOISY_LOGGERS`) are set to WARNING unless ``level`` is debug.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    if level != "debug":
        # Some py-libp2p modules set their own logger to INFO (auto_connector's chatter).
        handler.addFilter(_quiet_libp2p)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    # py-libp2p's import detaches its logger (no handler, propagate off), so its warnings
    # went to Python's last-resort handler as bare lines in the middle of the JSON log.
    # Imported first so that its import-time setup cannot undo this later.
    import libp2p  # noqa: F401

    libp2p_log = logging.getLogger("libp2p")
    libp2p_log.handlers.clear()
    libp2p_log.propagate = True


def event(level: int, msg: str, **fields: Any) -> None:
    """Log ``msg`` on ``odf.node`` with structured ``fields``."""
    log.log(level, msg, extra={"fields": fields})
