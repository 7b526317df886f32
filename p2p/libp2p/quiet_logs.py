"""One line, not a traceback, for py-libp2p errors a remote peer provokes at will.

py-libp2p 0.8.1's identify handler logs ``Error sending identify response ...`` at ERROR
with the formatted traceback *in the message* when the remote peer has already closed
the stream (it catches ``StreamClosed`` but not the ``StreamError`` its own stream
raises then). Any peer that connects and leaves at once (connection churn) provokes one
such multi-line record per connection, filling the node's log with tracebacks that say
nothing about the node. `install_log_filters` puts a filter on that logger: the record
keeps its first line, and the closed-stream case goes down to DEBUG.
"""

from __future__ import annotations

import logging
from typing import Final

from libp2p.network.stream.exceptions import StreamError

__all__ = ["IDENTIFY_LOGGER", "install_log_filters"]

IDENTIFY_LOGGER: Final = "libp2p.identity.identify.identify"
_IDENTIFY_ERROR: Final = "Error sending identify response"


class _IdentifyResponseFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg, args = record.msg, record.args
        if not (isinstance(msg, str) and msg.startswith(_IDENTIFY_ERROR)):
            return True
        if not isinstance(args, tuple) or len(args) < 3:
            return True
        record.msg = "identify response to %s failed: %s (%s)"
        record.args = args[:3]
        error_type = args[2]
        if isinstance(error_type, type) and issubclass(error_type, StreamError):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_FILTER: Final = _IdentifyResponseFilter()


def install_log_filters() -> None:
    """Install the filters (idempotent)."""
    logger = logging.getLogger(IDENTIFY_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
