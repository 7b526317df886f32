"""`p2p.libp2p.quiet_logs`: py-libp2p's identify error on a closed stream is one line."""

from __future__ import annotations

import logging

import pytest
from libp2p.identity.identify import identify
from libp2p.network.stream.exceptions import StreamError

from p2p.libp2p.quiet_logs import IDENTIFY_LOGGER, install_log_filters


def _emit(caplog: pytest.LogCaptureFixture, error: Exception) -> logging.LogRecord:
    install_log_filters()
    install_log_filters()  # idempotent
    logger = identify.logger  # the logger py-libp2p's identify handler writes to
    assert logger.name == IDENTIFY_LOGGER and len(logger.filters) == 1
    with caplog.at_level(logging.DEBUG, logger=IDENTIFY_LOGGER):
        # What py-libp2p 0.8.1's identify handler logs, word for word in its format.
        logger.error(
            "Error sending identify response to %s: %s (type: %s)\n%s",
            "12D3KooWpeer",
            error,
            type(error),
            "Traceback (most recent call last):\n  File ...",
        )
    return caplog.records[-1]


def test_a_closed_stream_is_one_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    record = _emit(caplog, StreamError("Write operation failed: closed"))
    assert record.levelno == logging.DEBUG
    assert "Traceback" not in record.getMessage() and "\n" not in record.getMessage()


def test_another_error_stays_an_error_without_the_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = _emit(caplog, RuntimeError("boom"))
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        "identify response to 12D3KooWpeer failed: boom (<class 'RuntimeError'>)"
    )
