"""Transform checkpoints: the per-input watermarks carried from one run to the next.

Format (the one kamu's Spark engine adapter produces): a tar archive of files named
``<input DID multibase>.watermark``, each holding one ISO-8601 instant line
(``2020-01-01T00:00:00Z``). Readers accept entries in any folder of the archive
(``./x.watermark`` or ``x.watermark``) and ignore other entries. Writers emit a
deterministic archive (sorted names, zero mtime/uid/gid), so equal watermarks give equal
checkpoint bytes.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from engine.errors import CheckpointError
from fbs.errors import InvalidTimestamp
from fbs.timestamp import Timestamp

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "MAX_CHECKPOINT_ENTRIES",
    "MAX_WATERMARK_FILE_BYTES",
    "WATERMARK_SUFFIX",
    "read_watermarks",
    "write_checkpoint",
]

#: Suffix of the per-input watermark files inside a checkpoint.
WATERMARK_SUFFIX: Final = ".watermark"
#: Largest checkpoint file read (a watermark entry takes ~1.5 KiB of tar).
MAX_CHECKPOINT_BYTES: Final = 16 * 1024 * 1024
#: Most archive entries read from a checkpoint.
MAX_CHECKPOINT_ENTRIES: Final = 10_000
#: Largest single watermark file (one timestamp line).
MAX_WATERMARK_FILE_BYTES: Final = 256


def read_watermarks(path: str | os.PathLike[str]) -> dict[str, Timestamp]:
    """Per-input watermarks stored in a checkpoint file.

    Args:
        path: the checkpoint file (a plain or compressed tar).

    Returns:
        DID multibase (``f01ed...``) -> watermark.

    Raises:
        CheckpointError: if the file is missing, too large, not a tar archive, or holds a
            watermark entry that is not one valid timestamp line.
    """
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror}") from None
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {path} is {size} bytes (limit {MAX_CHECKPOINT_BYTES})")
    result: dict[str, Timestamp] = {}
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_CHECKPOINT_ENTRIES:
                    raise CheckpointError(
                        f"checkpoint {path} has more than {MAX_CHECKPOINT_ENTRIES} entries"
                    )
                name = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or not name.endswith(WATERMARK_SUFFIX):
                    continue
                if member.size > MAX_WATERMARK_FILE_BYTES:
                    raise CheckpointError(f"checkpoint entry {member.name} is too large")
                f = tar.extractfile(member)
                if f is None:  # pragma: no cover - regular files always have data
                    continue
                data = f.read(MAX_WATERMARK_FILE_BYTES + 1)
                result[name[: -len(WATERMARK_SUFFIX)]] = _parse_watermark(member.name, data)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise CheckpointError(f"checkpoint {path} is not a readable tar archive: {e}") from None
    return result


def _parse_watermark(name: str, data: bytes) -> Timestamp:
    try:
        return Timestamp.parse_rfc3339(data.decode("ascii").strip())
    except (UnicodeDecodeError, InvalidTimestamp):
        raise CheckpointError(f"checkpoint entry {name} is not a timestamp line") from None


def write_checkpoint(path: str | os.PathLike[str], watermarks: Mapping[str, Timestamp]) -> None:
    """Write a checkpoint holding ``watermarks`` (DID multibase -> instant), atomically.

    Raises:
        CheckpointError: if there are too many entries, a key is not a plain file name,
            or the file cannot be written.
    """
    if len(watermarks) > MAX_CHECKPOINT_ENTRIES:
        raise CheckpointError(f"{len(watermarks)} watermarks exceed {MAX_CHECKPOINT_ENTRIES}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key in sorted(watermarks):
            if not key or "/" in key or key in (".", ".."):
                raise CheckpointError(f"invalid watermark key {key!r}")
            data = (watermarks[key].to_rfc3339() + "\n").encode("ascii")
            info = tarfile.TarInfo(key + WATERMARK_SUFFIX)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(buf.getvalue())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e}") from None
