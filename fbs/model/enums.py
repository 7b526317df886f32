"""Enums of the ODF v0.38.0 schema.

Member names are the spec names (``Millisecond``, ``Gzip``, ``ByName`` ...), values are
the flatbuffers values (0-based positions; the first member is the flatbuffers default).
"""

from __future__ import annotations

import enum

__all__ = ["CompressionFormat", "DatasetKind", "MqttQos", "SourceOrdering", "TimeUnit"]


class TimeUnit(enum.IntEnum):
    """Unit of time-based data types (int16 in the schema)."""

    Second = 0
    Millisecond = 1
    Microsecond = 2
    Nanosecond = 3


class CompressionFormat(enum.IntEnum):
    """Archive format of `PrepStepDecompress` (int32)."""

    Gzip = 0
    Zip = 1


class DatasetKind(enum.IntEnum):
    """Root (ingests external data) or Derivative (transforms other datasets) (int32)."""

    Root = 0
    Derivative = 1


class SourceOrdering(enum.IntEnum):
    """Order in which `FetchStepFilesGlob` processes files (int32)."""

    ByEventTime = 0
    ByName = 1


class MqttQos(enum.IntEnum):
    """MQTT quality of service (int32)."""

    AtMostOnce = 0
    AtLeastOnce = 1
    ExactlyOnce = 2
