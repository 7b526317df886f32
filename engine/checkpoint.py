"""Transform checkpoints: the per-input watermarks and the stream state carried between runs.

Format: a tar archive of files named ``<input DID multibase>.watermark``, each holding one
ISO-8601 instant line (``2020-01-01T00:00:00Z``) -- the layout kamu's Spark engine adapter
produces -- plus, for stateful queries, the files of a state folder under `STATE_PREFIX`
(``state/state.json`` and Parquet files, see `engine.streaming.state`). Readers accept
watermark entries in any folder of the archive (``./x.watermark`` or ``x.watermark``) and
ignore other entries. Writers emit a deterministic archive (sorted names, zero
mtime/uid/gid), so equal watermarks give equal checkpoint bytes.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from engine.errors import CheckpointError
from fbs.errors import InvalidTimestamp
from fbs.timestamp import Timestamp

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "MAX_CHECKPOINT_ENTRIES",
    "MAX_WATERMARK_FILE_BYTES",
    "STATE_PREFIX",
    "WATERMARK_SUFFIX",
    "extract_state",
    "read_watermarks",
    "write_checkpoint",
]

#: Suffix of the per-input watermark files inside a checkpoint.
WATERMARK_SUFFIX: Final = ".watermark"
#: Largest checkpoint file read. Watermarks take ~1.5 KiB of tar each; stream state (the
#: input rows of open windows, or a changelog query's input and live output) can be large,
#: and is streamed from the archive, never held in memory.
MAX_CHECKPOINT_BYTES: Final = 64 * 1024**3
#: Folder of the stream-state files inside a checkpoint archive.
STATE_PREFIX: Final = "state/"
#: Longest name of a state entry.
MAX_STATE_NAME: Final = 200
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
    _check_size(path)
    result: dict[str, Timestamp] = {}
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for member in _members(tar, path):
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


def write_checkpoint(
    path: str | os.PathLike[str],
    watermarks: Mapping[str, Timestamp],
    state_dir: Path | None = None,
) -> None:
    """Write a checkpoint holding ``watermarks`` (DID multibase -> instant) and the files of
    ``state_dir`` (stored under `STATE_PREFIX`), atomically.

    Raises:
        CheckpointError: if there are too many entries, a key is not a plain file name,
            or the file cannot be written.
    """
    if len(watermarks) > MAX_CHECKPOINT_ENTRIES:
        raise CheckpointError(f"{len(watermarks)} watermarks exceed {MAX_CHECKPOINT_ENTRIES}")
    for key in watermarks:
        if not key or "/" in key or key in (".", ".."):
            raise CheckpointError(f"invalid watermark key {key!r}")
    state_files = _state_files(state_dir) if state_dir is not None else []
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=target.parent)
        try:
            with (
                os.fdopen(fd, "wb") as f,
                tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                for key in sorted(watermarks):
                    data = (watermarks[key].to_rfc3339() + "\n").encode("ascii")
                    tar.addfile(_info(key + WATERMARK_SUFFIX, len(data)), io.BytesIO(data))
                for name, file in state_files:
                    with file.open("rb") as src:
                        tar.addfile(_info(STATE_PREFIX + name, file.stat().st_size), src)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e}") from None


def extract_state(path: str | os.PathLike[str], into: Path) -> bool:
    """Extract the state files of checkpoint ``path`` into folder ``into``.

    Only regular files with plain relative names are extracted (no links, no ``..``).

    Returns:
        True if the checkpoint holds state files.

    Raises:
        CheckpointError: if the file is missing, too large or not a tar archive, or a
            state entry has an unsafe name.
    """
    _check_size(path)
    found = False
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for member in _members(tar, path):
                name = member.name.removeprefix("./")
                if not name.startswith(STATE_PREFIX):
                    continue
                rel = name[len(STATE_PREFIX) :]
                if not member.isfile() or not _safe_name(rel):
                    raise CheckpointError(f"checkpoint entry {member.name!r} is not a state file")
                src = tar.extractfile(member)
                if src is None:  # pragma: no cover - regular files always have data
                    continue
                dest = into / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                with dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1024 * 1024)
                found = True
    except (tarfile.TarError, EOFError, OSError) as e:
        raise CheckpointError(f"checkpoint {path} is not a readable tar archive: {e}") from None
    return found


def _members(tar: tarfile.TarFile, path: str | os.PathLike[str]) -> Iterator[tarfile.TarInfo]:
    """The archive's entries, at most `MAX_CHECKPOINT_ENTRIES` of them."""
    for count, member in enumerate(tar, start=1):
        if count > MAX_CHECKPOINT_ENTRIES:
            raise CheckpointError(
                f"checkpoint {path} has more than {MAX_CHECKPOINT_ENTRIES} entries"
            )
        yield member


def _check_size(path: str | os.PathLike[str]) -> None:
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror}") from None
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {path} is {size} bytes (limit {MAX_CHECKPOINT_BYTES})")


def _safe_name(rel: str) -> bool:
    parts = rel.split("/")
    return (
        0 < len(rel) <= MAX_STATE_NAME
        and all(p and p not in (".", "..") for p in parts)
        and not rel.startswith("/")
        and "\\" not in rel
    )


def _state_files(state_dir: Path) -> list[tuple[str, Path]]:
    files = sorted(
        (p.relative_to(state_dir).as_posix(), p) for p in state_dir.rglob("*") if p.is_file()
    )
    if len(files) > MAX_CHECKPOINT_ENTRIES:
        raise CheckpointError(f"{len(files)} state files exceed {MAX_CHECKPOINT_ENTRIES}")
    for name, _ in files:
        if not _safe_name(name):
            raise CheckpointError(f"invalid state file name {name!r}")
    return files


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = 0
    return info
