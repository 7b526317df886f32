"""Prepare steps: turn a fetched file into the file the read step expects.

- `PrepStepDecompress` ``Gzip``: the decompressed stream. ``Zip``: the member named by
  ``subPath`` (an exact member name, or a glob that must match exactly one file); without
  ``subPath`` the archive must hold exactly one file.
- `PrepStepPipe`: ``command`` (argv, no shell) runs with the file on stdin; its stdout is the
  result. A non-zero exit is a `PrepareError` quoting the tail of stderr.

Decompression is bounded against archive bombs: at most ``max_output_bytes`` per output and
at most ``max_ratio`` output bytes per input byte (checked once the output passes
``ratio_grace_bytes``), counting real bytes, not what the archive headers claim. Outputs
are new files in ``workdir``; the input is never modified.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import os
import subprocess
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from fbs.model.enums import CompressionFormat
from fbs.model.source import PrepStep, PrepStepDecompress, PrepStepPipe
from node.ingest.errors import PrepareError, ToolMissing, UnsupportedFormat

#: Largest decompressed output (bytes).
MAX_DECOMPRESSED_BYTES: Final = 16 << 30
#: Largest ratio of decompressed to compressed bytes.
MAX_COMPRESSION_RATIO: Final = 1000
#: Output size below which the ratio is not checked (tiny inputs compress very well).
RATIO_GRACE_BYTES: Final = 16 << 20
#: Most entries a zip archive may list.
MAX_ZIP_ENTRIES: Final = 100_000
#: Longest a Pipe command may run (seconds).
PIPE_TIMEOUT_SECONDS: Final = 3600.0
#: Bytes of stderr quoted in a Pipe error.
STDERR_TAIL_BYTES: Final = 2000

_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class PrepareLimits:
    """Limits of the prepare steps (see the module docstring)."""

    max_output_bytes: int = MAX_DECOMPRESSED_BYTES
    max_ratio: int = MAX_COMPRESSION_RATIO
    ratio_grace_bytes: int = RATIO_GRACE_BYTES
    max_zip_entries: int = MAX_ZIP_ENTRIES
    pipe_timeout: float = PIPE_TIMEOUT_SECONDS


DEFAULT_LIMITS: Final = PrepareLimits()


def _copy_bounded(
    src: BinaryIO, dst: BinaryIO, compressed_size: int, limits: PrepareLimits, what: str
) -> None:
    total = 0
    while True:
        chunk = src.read(_CHUNK)
        if not chunk:
            return
        total += len(chunk)
        if total > limits.max_output_bytes:
            raise PrepareError(
                f"{what}: decompressed size exceeds the limit of {limits.max_output_bytes} bytes"
            )
        if total > limits.ratio_grace_bytes and total > limits.max_ratio * max(compressed_size, 1):
            raise PrepareError(
                f"{what}: compression ratio exceeds {limits.max_ratio}:1 (possible archive bomb)"
            )
        dst.write(chunk)


def _gunzip(path: Path, out: Path, limits: PrepareLimits) -> None:
    size = path.stat().st_size
    try:
        with gzip.open(path, "rb") as src, out.open("wb") as dst:
            _copy_bounded(src, dst, size, limits, str(path))  # type: ignore[arg-type]
    except (OSError, EOFError, zlib.error) as e:
        raise PrepareError(f"{path}: not a valid gzip file: {e}") from None


def _zip_member(zf: zipfile.ZipFile, sub_path: str | None, path: Path) -> zipfile.ZipInfo:
    files = [i for i in zf.infolist() if not i.is_dir()]
    if sub_path is None:
        if len(files) != 1:
            raise PrepareError(
                f"{path}: archive holds {len(files)} files; set subPath to choose one"
            )
        return files[0]
    exact = [i for i in files if i.filename == sub_path]
    if exact:
        return exact[0]
    matches = [i for i in files if fnmatch.fnmatchcase(i.filename, sub_path)]
    if len(matches) != 1:
        names = ", ".join(i.filename for i in files[:20])
        raise PrepareError(
            f"{path}: subPath {sub_path!r} matches {len(matches)} archive members "
            f"(expected one; members: {names})"
        )
    return matches[0]


def open_zip(path: Path, limits: PrepareLimits = DEFAULT_LIMITS) -> zipfile.ZipFile:
    """Open a zip archive, refusing one with more than ``max_zip_entries`` entries.

    Raises:
        PrepareError: not a zip archive, or too many entries.
    """
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as e:
        raise PrepareError(f"{path}: not a valid zip archive: {e}") from None
    if len(zf.infolist()) > limits.max_zip_entries:
        zf.close()
        raise PrepareError(f"{path}: archive lists more than {limits.max_zip_entries} entries")
    return zf


def extract_member(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path, limits: PrepareLimits, path: Path
) -> None:
    """Extract one member to ``out`` under the size and ratio limits.

    Raises:
        PrepareError: corrupt member, encrypted member, or a limit exceeded.
    """
    what = f"{path}!{info.filename}"
    try:
        with zf.open(info) as src, out.open("wb") as dst:
            _copy_bounded(src, dst, info.compress_size, limits, what)  # type: ignore[arg-type]
    except (OSError, zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError) as e:
        raise PrepareError(f"{what}: cannot extract: {e}") from None


def _unzip(path: Path, sub_path: str | None, out: Path, limits: PrepareLimits) -> None:
    with open_zip(path, limits) as zf:
        extract_member(zf, _zip_member(zf, sub_path, path), out, limits, path)


def _pipe(command: Sequence[str], path: Path, out: Path, limits: PrepareLimits) -> None:
    if not command:
        raise PrepareError("Pipe step has an empty command")
    with (
        path.open("rb") as stdin,
        out.open("wb") as stdout,
        tempfile.TemporaryFile() as stderr,
    ):
        try:
            proc = subprocess.run(
                list(command),
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                timeout=limits.pipe_timeout,
                check=False,
            )
        except FileNotFoundError:
            raise ToolMissing(f"Pipe command {command[0]!r} is not installed") from None
        except PermissionError as e:
            raise PrepareError(f"Pipe command {command[0]!r} cannot run: {e}") from None
        except subprocess.TimeoutExpired:
            raise PrepareError(
                f"Pipe command {' '.join(command)!r} ran longer than {limits.pipe_timeout} s"
            ) from None
        if proc.returncode != 0:
            size = stderr.tell()
            stderr.seek(max(0, size - STDERR_TAIL_BYTES))
            tail = stderr.read().decode("utf-8", "replace").strip()
            raise PrepareError(
                f"Pipe command {' '.join(command)!r} exited with {proc.returncode}"
                + (f": {tail}" if tail else "")
            )


def prepare(
    steps: Sequence[PrepStep],
    path: Path,
    workdir: Path,
    *,
    limits: PrepareLimits = DEFAULT_LIMITS,
) -> Path:
    """Apply prepare ``steps`` in order; the path of the final file (``path`` if none).

    Raises:
        PrepareError: a corrupt archive, a missing/ambiguous ``subPath``, a limit exceeded,
            a Pipe command that fails.
        ToolMissing: a Pipe command that is not installed.
        UnsupportedFormat: an unknown step or compression format.
    """
    current = Path(path)
    workdir.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate(steps):
        # A unique name: several fetched files may share a base name in one workdir.
        base = current.name.removesuffix(".gz").removesuffix(".zip")[-64:]
        fd, name = tempfile.mkstemp(prefix=f"prepared-{i}-", suffix=f"-{base}", dir=workdir)
        os.close(fd)
        out = Path(name)
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(out.unlink, missing_ok=True)
            if isinstance(step, PrepStepDecompress):
                if step.format == CompressionFormat.Gzip:
                    _gunzip(current, out, limits)
                elif step.format == CompressionFormat.Zip:
                    _unzip(current, step.sub_path, out, limits)
                else:
                    raise UnsupportedFormat(f"unknown compression format {step.format!r}")
            elif isinstance(step, PrepStepPipe):
                _pipe(step.command, current, out, limits)
            else:
                raise UnsupportedFormat(f"unknown prepare step {type(step).__name__}")
            cleanup.pop_all()
        current = out
    return current


__all__ = [
    "DEFAULT_LIMITS",
    "MAX_COMPRESSION_RATIO",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_ZIP_ENTRIES",
    "PIPE_TIMEOUT_SECONDS",
    "PrepareLimits",
    "extract_member",
    "open_zip",
    "prepare",
]
