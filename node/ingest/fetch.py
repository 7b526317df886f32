"""Fetch step of polling sources: bring the source's data to local files.

`fetch` returns a `FetchResult`: the files to read (in ingest order), the source state to
record in ``AddData.newSourceState`` and whether the source was ``up_to_date`` (nothing new:
the caller commits nothing).

- `FetchStepUrl` (``http``, ``https``, ``file``): request headers are sent as given. An
  ``ETag`` is recorded as state kind ``odf/etag``, else ``Last-Modified`` as
  ``odf/last-modified`` (for ``file:`` URLs: the file's mtime as an HTTP date); they are
  sent back as ``If-None-Match`` / ``If-Modified-Since`` and a ``304`` (or an unchanged
  mtime) means up to date. Downloads stream to ``workdir`` under ``max_download_bytes``
  and ``timeout``; network failures and HTTP errors raise `SourceUnreachable` naming the URL.
- `FetchStepFilesGlob`: files matching the glob, ordered by name (default) or by event
  time (ties by name). The last file handed out is remembered as state kind
  ``odf/files-glob-last`` whose value is JSON ``{"path": ..., "eventTime": ...}``; only
  files after it (in the chosen order) are returned next time. Each `FetchedFile` carries
  the state to record once *it* is committed (``state``), so a caller may commit file by
  file. No new file ⇒ up to date.
- `FetchStepContainer`: runs ``image`` with podman (preferred) or docker; the container's
  stdout is the fetched file. Env vars without a value take the host's value. No state is
  kept (every pull runs the container). Neither tool present ⇒ `ToolMissing`.
- `FetchStepMqtt`, `FetchStepEthereumLogs` ⇒ `UnsupportedFormat`.

Event time (``eventTime``; default `EventTimeSourceFromMetadata`): ``FromMetadata`` =
``Last-Modified`` or the file mtime (None when unknown); ``FromPath`` = the first group of
``pattern`` (regex searched in the path/URL; the whole match if it has no group) parsed
with ``timestampFormat`` (Spark/Java pattern or strptime, ISO 8601 by default; zone-less
times are UTC); ``FromSystemTime`` = ``system_time``.

Caching ``Forever``: once a source has any state it is never fetched again. When the
source gave no ETag/Last-Modified, the state kind ``odf/fetched-at`` (value: system time,
RFC 3339) records that the one fetch happened.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import glob as globmod
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fbs.errors import InvalidTimestamp
from fbs.model.enums import SourceOrdering
from fbs.model.events import SourceState
from fbs.model.source import (
    EventTimeSource,
    EventTimeSourceFromMetadata,
    EventTimeSourceFromPath,
    EventTimeSourceFromSystemTime,
    FetchStep,
    FetchStepContainer,
    FetchStepEthereumLogs,
    FetchStepFilesGlob,
    FetchStepMqtt,
    FetchStepUrl,
    SourceCachingForever,
)
from fbs.timestamp import Timestamp
from node.ingest.errors import (
    FetchError,
    SchemaError,
    SourceUnreachable,
    ToolMissing,
    UnsupportedFormat,
)
from node.ingest.readers._common import translate_time_format

__all__ = [
    "DEFAULT_FETCH_LIMITS",
    "DEFAULT_SOURCE_NAME",
    "STATE_ETAG",
    "STATE_FETCHED_AT",
    "STATE_FILES_GLOB_LAST",
    "STATE_LAST_MODIFIED",
    "FetchLimits",
    "FetchResult",
    "FetchedFile",
    "fetch",
]

STATE_ETAG: Final = "odf/etag"
STATE_LAST_MODIFIED: Final = "odf/last-modified"
STATE_FILES_GLOB_LAST: Final = "odf/files-glob-last"
STATE_FETCHED_AT: Final = "odf/fetched-at"

#: Source name recorded in states of a polling source (which has no name of its own).
DEFAULT_SOURCE_NAME: Final = "default"

#: Seconds to wait for a network connect / read.
HTTP_TIMEOUT_SECONDS: Final = 60.0
#: Largest download accepted (bytes).
MAX_DOWNLOAD_BYTES: Final = 16 << 30
#: Most files a glob may match.
MAX_GLOB_FILES: Final = 1_000_000
#: Longest a fetch container may run (seconds).
CONTAINER_TIMEOUT_SECONDS: Final = 3600.0
#: Container tools tried in order.
CONTAINER_RUNTIMES: Final = ("podman", "docker")
#: Bytes of stderr quoted in a container error.
STDERR_TAIL_BYTES: Final = 2000

_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """Limits of the fetch steps (see the module docstring)."""

    timeout: float = HTTP_TIMEOUT_SECONDS
    max_download_bytes: int = MAX_DOWNLOAD_BYTES
    max_glob_files: int = MAX_GLOB_FILES
    container_timeout: float = CONTAINER_TIMEOUT_SECONDS
    container_runtimes: tuple[str, ...] = CONTAINER_RUNTIMES


DEFAULT_FETCH_LIMITS: Final = FetchLimits()


@dataclass(frozen=True, slots=True)
class FetchedFile:
    """One fetched file.

    Attributes:
        path: local path of the data.
        event_time: event time of its records per the step's ``eventTime`` (None: unknown).
        name: what it came from (URL, file path, container image), for messages.
        state: source state to record once this file is committed (FilesGlob).
    """

    path: Path
    event_time: Timestamp | None
    name: str
    state: SourceState | None = None


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Outcome of a fetch.

    Attributes:
        files: files to read, in ingest order (empty when up to date).
        new_state: state to record after ingesting all ``files`` (None: none to record).
        up_to_date: nothing new at the source.
    """

    files: tuple[FetchedFile, ...]
    new_state: SourceState | None
    up_to_date: bool


def _up_to_date() -> FetchResult:
    return FetchResult(files=(), new_state=None, up_to_date=True)


# -- event time ----------------------------------------------------------------------------


def _parse_time_text(text: str, fmt: str | None, what: str) -> Timestamp:
    try:
        if fmt:
            parsed = dt.datetime.strptime(text, translate_time_format(fmt))
        else:
            parsed = dt.datetime.fromisoformat(text.replace("z", "Z"))
    except (ValueError, SchemaError) as e:
        raise FetchError(f"{what}: cannot parse event time {text!r}: {e}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        return Timestamp.from_datetime(parsed)
    except InvalidTimestamp as e:
        raise FetchError(f"{what}: bad event time {text!r}: {e}") from None


def _event_time_from_path(source: EventTimeSourceFromPath, name: str) -> Timestamp:
    try:
        m = re.search(source.pattern, name)
    except re.error as e:
        raise SchemaError(f"bad eventTime pattern {source.pattern!r}: {e}") from None
    if m is None:
        raise FetchError(f"{name}: eventTime pattern {source.pattern!r} does not match")
    text = m.group(1) if m.groups() else m.group(0)
    return _parse_time_text(text, source.timestamp_format, name)


def _event_time(
    source: EventTimeSource | None,
    name: str,
    metadata_time: Timestamp | None,
    system_time: Timestamp,
) -> Timestamp | None:
    if source is None or isinstance(source, EventTimeSourceFromMetadata):
        return metadata_time
    if isinstance(source, EventTimeSourceFromSystemTime):
        return system_time
    if isinstance(source, EventTimeSourceFromPath):
        return _event_time_from_path(source, name)
    raise UnsupportedFormat(f"unknown event time source {type(source).__name__}")


def _http_date_time(value: str | None) -> Timestamp | None:
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return Timestamp.from_datetime(parsed)


def _mtime(path: Path) -> tuple[Timestamp, str]:
    """File mtime as a timestamp (whole seconds, like HTTP dates) and an HTTP date."""
    seconds = int(path.stat().st_mtime)
    return Timestamp(seconds * 1_000_000_000), email.utils.formatdate(seconds, usegmt=True)


# -- Url -----------------------------------------------------------------------------------


def _state_from(
    source_name: str, etag: str | None, last_modified: str | None
) -> SourceState | None:
    if etag:
        return SourceState(source_name=source_name, kind=STATE_ETAG, value=etag)
    if last_modified:
        return SourceState(source_name=source_name, kind=STATE_LAST_MODIFIED, value=last_modified)
    return None


def _download(resp: Any, out: Path, url: str, limits: FetchLimits) -> None:
    total = 0
    try:
        with out.open("wb") as f:
            while True:
                chunk = resp.read(_CHUNK)
                if not chunk:
                    return
                total += len(chunk)
                if total > limits.max_download_bytes:
                    raise FetchError(
                        f"{url}: download exceeds the limit of {limits.max_download_bytes} bytes"
                    )
                f.write(chunk)
    except (OSError, urllib.error.URLError) as e:
        out.unlink(missing_ok=True)
        raise SourceUnreachable(f"{url}: download failed: {e}") from None
    except FetchError:
        out.unlink(missing_ok=True)
        raise


def _fetch_http(
    step: FetchStepUrl,
    prev_state: SourceState | None,
    source_name: str,
    workdir: Path,
    system_time: Timestamp,
    limits: FetchLimits,
) -> FetchResult:
    url = step.url
    headers = {h.name: h.value for h in step.headers or ()}
    if prev_state is not None and prev_state.kind == STATE_ETAG:
        headers["If-None-Match"] = prev_state.value
    elif prev_state is not None and prev_state.kind == STATE_LAST_MODIFIED:
        headers["If-Modified-Since"] = prev_state.value
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        resp = urllib.request.urlopen(request, timeout=limits.timeout)
    except urllib.error.HTTPError as e:
        if e.code == 304:
            e.close()
            return _up_to_date()
        e.close()
        raise SourceUnreachable(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise SourceUnreachable(f"{url}: unreachable: {reason}") from None
    with resp:
        length = resp.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > limits.max_download_bytes:
            raise FetchError(
                f"{url}: Content-Length {length} exceeds the limit of "
                f"{limits.max_download_bytes} bytes"
            )
        fd, name = tempfile.mkstemp(prefix="fetch-", suffix=_suffix(url), dir=workdir)
        os.close(fd)
        out = Path(name)
        _download(resp, out, url, limits)
        etag = resp.headers.get("ETag")
        last_modified = resp.headers.get("Last-Modified")
    state = _state_from(source_name, etag, last_modified)
    event_time = _event_time(step.event_time, url, _http_date_time(last_modified), system_time)
    return FetchResult(
        files=(FetchedFile(path=out, event_time=event_time, name=url, state=state),),
        new_state=state,
        up_to_date=False,
    )


def _suffix(url: str) -> str:
    name = Path(urllib.parse.urlparse(url).path).name
    suffix = "".join(Path(name).suffixes)[-16:]
    return re.sub(r"[^A-Za-z0-9.]", "", suffix)


def _fetch_file_url(
    step: FetchStepUrl,
    prev_state: SourceState | None,
    source_name: str,
    system_time: Timestamp,
) -> FetchResult:
    parsed = urllib.parse.urlparse(step.url)
    path = Path(urllib.request.url2pathname(parsed.path))
    if parsed.netloc not in ("", "localhost"):
        raise SourceUnreachable(f"{step.url}: file URLs must name a local path")
    if not path.is_file():
        raise SourceUnreachable(f"{step.url}: no such file")
    mtime, http_date = _mtime(path)
    if (
        prev_state is not None
        and prev_state.kind == STATE_LAST_MODIFIED
        and prev_state.value == http_date
    ):
        return _up_to_date()
    state = SourceState(source_name=source_name, kind=STATE_LAST_MODIFIED, value=http_date)
    event_time = _event_time(step.event_time, str(path), mtime, system_time)
    return FetchResult(
        files=(FetchedFile(path=path, event_time=event_time, name=step.url, state=state),),
        new_state=state,
        up_to_date=False,
    )


def _fetch_url(
    step: FetchStepUrl,
    prev_state: SourceState | None,
    source_name: str,
    workdir: Path,
    system_time: Timestamp,
    limits: FetchLimits,
) -> FetchResult:
    scheme = urllib.parse.urlparse(step.url).scheme.lower()
    if scheme == "file":
        result = _fetch_file_url(step, prev_state, source_name, system_time)
    elif scheme in ("http", "https"):
        result = _fetch_http(step, prev_state, source_name, workdir, system_time, limits)
    else:
        raise UnsupportedFormat(f"{step.url}: URL scheme {scheme!r} is not supported")
    return result


# -- FilesGlob -----------------------------------------------------------------------------


def _glob_key(ordering: SourceOrdering, name: str, event_time: Timestamp | None) -> tuple[Any, ...]:
    if ordering == SourceOrdering.ByEventTime:
        # Files without an event time sort first (they cannot be placed in time).
        return (event_time is not None, event_time.nanos if event_time else 0, name)
    return (name,)


def _glob_state(source_name: str, name: str, event_time: Timestamp | None) -> SourceState:
    value = json.dumps(
        {"path": name, "eventTime": event_time.to_rfc3339() if event_time else None},
        sort_keys=True,
        separators=(",", ":"),
    )
    return SourceState(source_name=source_name, kind=STATE_FILES_GLOB_LAST, value=value)


def _parse_glob_state(state: SourceState) -> tuple[str, Timestamp | None]:
    try:
        data = json.loads(state.value)
        name = data["path"]
        et = data.get("eventTime")
        if not isinstance(name, str):
            raise TypeError("path")
        return name, Timestamp.parse_rfc3339(et) if et else None
    except (ValueError, TypeError, KeyError, InvalidTimestamp) as e:
        raise FetchError(f"unreadable {STATE_FILES_GLOB_LAST} state {state.value!r}: {e}") from None


def _fetch_glob(
    step: FetchStepFilesGlob,
    prev_state: SourceState | None,
    source_name: str,
    system_time: Timestamp,
    limits: FetchLimits,
) -> FetchResult:
    ordering = step.order if step.order is not None else SourceOrdering.ByName
    found: list[tuple[tuple[Any, ...], FetchedFile]] = []
    for i, name in enumerate(sorted(globmod.iglob(step.path, recursive=True))):
        if i >= limits.max_glob_files:
            raise FetchError(f"glob {step.path!r} matches more than {limits.max_glob_files} files")
        path = Path(name)
        if not path.is_file():
            continue
        try:
            mtime = _mtime(path)[0]
        except OSError as e:
            raise SourceUnreachable(f"{name}: cannot stat: {e}") from None
        event_time = _event_time(step.event_time, name, mtime, system_time)
        state = _glob_state(source_name, name, event_time)
        fetched = FetchedFile(path=path, event_time=event_time, name=name, state=state)
        found.append((_glob_key(ordering, name, event_time), fetched))
    found.sort(key=lambda item: item[0])
    if prev_state is not None and prev_state.kind == STATE_FILES_GLOB_LAST:
        last_name, last_time = _parse_glob_state(prev_state)
        last_key = _glob_key(ordering, last_name, last_time)
        found = [item for item in found if item[0] > last_key]
    if not found:
        return _up_to_date()
    files = tuple(f for _, f in found)
    return FetchResult(files=files, new_state=files[-1].state, up_to_date=False)


# -- Container -----------------------------------------------------------------------------


def _container_tool(limits: FetchLimits) -> str:
    for tool in limits.container_runtimes:
        found = shutil.which(tool)
        if found:
            return found
    raise ToolMissing(
        f"FetchStepContainer needs {' or '.join(limits.container_runtimes)}, "
        "and none is installed (on PATH)"
    )


def _container_argv(tool: str, step: FetchStepContainer, env: Mapping[str, str]) -> list[str]:
    argv = [tool, "run", "--rm", "-i"]
    for var in step.env or ():
        value = var.value if var.value is not None else env.get(var.name)
        if value is None:
            raise FetchError(f"container env var {var.name!r} has no value and is not set here")
        argv += ["-e", f"{var.name}={value}"]
    command = list(step.command or ())
    if command:
        argv += ["--entrypoint", command[0]]
    argv.append(step.image)
    argv += command[1:]
    argv += list(step.args or ())
    return argv


def _fetch_container(
    step: FetchStepContainer,
    workdir: Path,
    system_time: Timestamp,
    limits: FetchLimits,
) -> FetchResult:
    argv = _container_argv(_container_tool(limits), step, os.environ)
    fd, name = tempfile.mkstemp(prefix="container-", suffix=".out", dir=workdir)
    out = Path(name)
    with os.fdopen(fd, "wb") as stdout, tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                timeout=limits.container_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            out.unlink(missing_ok=True)
            raise FetchError(
                f"container {step.image!r} ran longer than {limits.container_timeout} s"
            ) from None
        except OSError as e:
            out.unlink(missing_ok=True)
            raise ToolMissing(f"cannot run {argv[0]!r}: {e}") from None
        if proc.returncode != 0:
            size = stderr.tell()
            stderr.seek(max(0, size - STDERR_TAIL_BYTES))
            tail = stderr.read().decode("utf-8", "replace").strip()
            out.unlink(missing_ok=True)
            raise FetchError(
                f"container {step.image!r} exited with {proc.returncode}"
                + (f": {tail}" if tail else "")
            )
    event_time = system_time
    return FetchResult(
        files=(FetchedFile(path=out, event_time=event_time, name=step.image),),
        new_state=None,
        up_to_date=False,
    )


# -- entry point ---------------------------------------------------------------------------


def fetch(
    step: FetchStep,
    *,
    prev_state: SourceState | None,
    source_name: str | None,
    workdir: Path,
    system_time: Timestamp,
    limits: FetchLimits = DEFAULT_FETCH_LIMITS,
) -> FetchResult:
    """Fetch the data of a polling source (see the module docstring for each step).

    Args:
        step: the fetch step.
        prev_state: the last recorded source state (``AddData.newSourceState``), if any.
        source_name: the source's name (None for a polling source: `DEFAULT_SOURCE_NAME`).
        workdir: directory for downloaded / produced files (created if missing).
        system_time: the ingest's system time (``FromSystemTime``, ``odf/fetched-at``).
        limits: timeouts and size limits.

    Raises:
        SourceUnreachable: a URL or file that cannot be reached (names it).
        ToolMissing: no podman/docker for a container step.
        FetchError: a download over the limit, a failing container, an event time that
            cannot be extracted, an unreadable previous state.
        UnsupportedFormat: Mqtt, EthereumLogs, or an unknown URL scheme.
        SchemaError: a bad ``eventTime`` regex or time format.
    """
    name = source_name or DEFAULT_SOURCE_NAME
    cache = getattr(step, "cache", None)
    if isinstance(cache, SourceCachingForever) and prev_state is not None:
        return _up_to_date()
    workdir.mkdir(parents=True, exist_ok=True)
    if isinstance(step, FetchStepUrl):
        result = _fetch_url(step, prev_state, name, workdir, system_time, limits)
    elif isinstance(step, FetchStepFilesGlob):
        result = _fetch_glob(step, prev_state, name, system_time, limits)
    elif isinstance(step, FetchStepContainer):
        result = _fetch_container(step, workdir, system_time, limits)
    elif isinstance(step, FetchStepMqtt | FetchStepEthereumLogs):
        raise UnsupportedFormat(f"{type(step).__name__} sources are not supported by this node")
    else:
        raise UnsupportedFormat(f"unknown fetch step {type(step).__name__}")
    if isinstance(cache, SourceCachingForever) and result.new_state is None and result.files:
        # Remember that the one fetch happened even without ETag / Last-Modified.
        state = SourceState(source_name=name, kind=STATE_FETCHED_AT, value=system_time.to_rfc3339())
        files = tuple(
            FetchedFile(path=f.path, event_time=f.event_time, name=f.name, state=state)
            for f in result.files
        )
        result = FetchResult(files=files, new_state=state, up_to_date=False)
    return result
