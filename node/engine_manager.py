"""The engine on demand: find a configured engine, or start one and share it.

`get_engine` returns an `engine.client.EngineClient`, resolving the engine in this order:

1. ``$ODF_ENGINE_ADDRESS`` (``host:port``);
2. the workspace config ``.odf/config.json``: ``{"engine": {"address": "host:port"}}``;
3. a *shared engine*, started on demand and reused by every ``odf`` invocation until it
   has been idle for a while (below): one per user, shared by all of the user's
   workspaces; a workspace whose engine settings differ from the defaults (a Spark
   ``master`` in its config or ``$ODF_ENGINE_MASTER``) gets its own in ``.odf/run/``, as
   does every workspace of a user without a usable run folder (below);
4. without a workspace: a private engine child process, stopped when this process exits.

`dataset_engine` does the same for a dataset (its workspace's engine, if it is in one).
`engine_provider` / `lazy_engine` look the engine up only when it is first needed (a pull
with nothing to run, an ingest without preprocess, a replay of a root neither starts nor
leases an engine): the one way transform, replay and ingest preprocess reach it.

Within one process the same client is always returned (one channel per address).

One engine serves many workspaces because it holds nothing of theirs: every request
names the absolute paths it reads and writes (input slices, checkpoints, the output
file) and runs in a child session of its own; the engine's working folder is its run
folder, not a workspace.

Run folder of the user's engine: ``$ODF_ENGINE_RUN_DIR``, else ``$XDG_RUNTIME_DIR/odf``
(when that folder is this user's), else ``~/.cache/odf``; created mode 0700, used only
if this user owns it and nobody else can write to it. It holds:

- ``engine.json`` (mode 0600, read only if this user owns it): ``{"pid", "enginePid",
  "address", "startedAt", "idleTimeout", "state"}``, written by the supervisor as
  ``starting`` as soon as it runs (``enginePid`` 0 and no address until the engine
  process exists, then both), and as ``running`` once the engine accepts connections;
- ``engine.lock``: flock serializing "reuse or start" decisions and the idle shutdown;
- ``engine.use``: every client process holds a *shared* flock on it (its lease) for as
  long as it may call the engine, and touches it when it takes and drops the lease;
- ``engine.activity``: touched by the engine when each request starts and ends;
- ``engine.log`` / ``supervisor.log``: the engine's and the supervisor's output.

The supervisor (``python -m node.engine_manager supervise``) is started detached (own
session, so a Ctrl-C in the terminal does not reach it); it starts the engine with
`engine.process.start_engine_process`, records it, then checks every
`SUPERVISOR_POLL_S` seconds:

- its owner is gone: the run folder was deleted, or ``engine.json`` no longer names
  this supervisor (also while the engine boots): it stops the engine and exits;
- idle: no process holds a lease (the exclusive flock on ``engine.use`` succeeds) and
  neither a lease nor a request was seen for the idle timeout (default
  `DEFAULT_IDLE_TIMEOUT_S`, ``$ODF_ENGINE_IDLE_TIMEOUT`` or
  ``{"engine": {"idleTimeoutSeconds": N}}`` of the workspace that started it): it
  removes ``engine.json`` and stops the engine.

SIGTERM to the supervisor (``odf engine stop``) stops both at once. A record whose
supervisor is dead, or a running one whose port is closed, is stale and replaced.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from node.errors import EngineManagerError, EngineSettingsError
from storage.fsutil import atomic_write_bytes
from storage.lockfile import FileLock, file_lock

if TYPE_CHECKING:
    from engine.client import EngineClient
    from engine.process import EngineProcess
    from storage.dataset import Dataset
    from storage.workspace import Workspace

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_IDLE_TIMEOUT_S",
    "ENGINE_ADDRESS_ENV",
    "ENGINE_IDLE_TIMEOUT_ENV",
    "ENGINE_MASTER_ENV",
    "ENGINE_RUN_DIR_ENV",
    "STATE_RUNNING",
    "STATE_STARTING",
    "EngineProvider",
    "EngineRecord",
    "acquire_shared_engine",
    "configured_address",
    "dataset_engine",
    "engine_provider",
    "engine_run_dir",
    "engine_status",
    "get_engine",
    "lazy_engine",
    "main",
    "release_lease",
    "stop_shared_engine",
    "user_run_dir",
    "workspace_of",
]

ENGINE_ADDRESS_ENV: Final = "ODF_ENGINE_ADDRESS"
ENGINE_MASTER_ENV: Final = "ODF_ENGINE_MASTER"
ENGINE_IDLE_TIMEOUT_ENV: Final = "ODF_ENGINE_IDLE_TIMEOUT"
#: The run folder of the user's shared engine (tests point it at a folder of their own).
ENGINE_RUN_DIR_ENV: Final = "ODF_ENGINE_RUN_DIR"
CONFIG_FILE: Final = "config.json"
RUN_DIR: Final = "run"
RECORD_FILE: Final = "engine.json"
LOCK_FILE: Final = "engine.lock"
USE_FILE: Final = "engine.use"
ACTIVITY_FILE: Final = "engine.activity"
#: Permission bits of the user's run folder and of the files in it.
PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600
STATE_STARTING: Final = "starting"
STATE_RUNNING: Final = "running"
ENGINE_LOG: Final = "engine.log"
SUPERVISOR_LOG: Final = "supervisor.log"
#: Seconds a shared engine stays up without users.
DEFAULT_IDLE_TIMEOUT_S: Final = 900.0
#: Seconds between the supervisor's idle / liveness checks.
SUPERVISOR_POLL_S: Final = 1.0
#: Seconds to wait for a started engine (JVM start + warm-up on a busy machine).
DEFAULT_START_TIMEOUT_S: Final = 240.0
#: Seconds to wait for the manager lock (another process may be starting the engine).
LOCK_TIMEOUT_S: Final = DEFAULT_START_TIMEOUT_S + 60.0
#: Largest config / record file read.
MAX_CONFIG_BYTES: Final = 64 * 1024
_LOG_TAIL_BYTES: Final = 4096

#: Returns the engine client; called only when the engine is about to be used.
EngineProvider = Callable[[], "EngineClient"]

_lock = threading.Lock()
_clients: dict[str, EngineClient] = {}
_leases: dict[Path, FileLock] = {}
_private: EngineProcess | None = None


# -- configuration ----------------------------------------------------------------------------


def _read_json(path: Path, *, owned: bool = False) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` if absent, malformed, too large, or (with
    ``owned``) a symlink or a file of another user."""
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_NOFOLLOW if owned else 0))
        with os.fdopen(fd, "rb") as f:
            if owned and os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_CONFIG_BYTES:
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _engine_config(ws: Workspace | None) -> dict[str, Any]:
    if ws is None:
        return {}
    config = _read_json(ws.root / CONFIG_FILE) or {}
    engine = config.get("engine")
    return engine if isinstance(engine, dict) else {}


def _check_address(address: str, where: str) -> str:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 < int(port) < 65536):
        raise EngineSettingsError(f"invalid engine address {address!r} in {where} (host:port)")
    return address


def configured_address(ws: Workspace | None) -> str | None:
    """The engine address from ``$ODF_ENGINE_ADDRESS`` or the workspace config, if any.

    Raises:
        EngineSettingsError: a configured address that is not ``host:port``.
    """
    env = os.environ.get(ENGINE_ADDRESS_ENV)
    if env:
        return _check_address(env, f"${ENGINE_ADDRESS_ENV}")
    address = _engine_config(ws).get("address")
    if isinstance(address, str) and address:
        return _check_address(address, CONFIG_FILE)
    return None


def _idle_timeout(ws: Workspace | None) -> float:
    raw: Any = os.environ.get(ENGINE_IDLE_TIMEOUT_ENV) or _engine_config(ws).get(
        "idleTimeoutSeconds"
    )
    if raw is None:
        return DEFAULT_IDLE_TIMEOUT_S
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise EngineSettingsError(f"invalid engine idle timeout {raw!r}") from None
    if not value > 0:
        raise EngineSettingsError(f"engine idle timeout must be positive, got {raw!r}")
    return value


def _master(ws: Workspace | None) -> str | None:
    value = os.environ.get(ENGINE_MASTER_ENV) or _engine_config(ws).get("master")
    return value if isinstance(value, str) and value else None


# -- the process-wide client ------------------------------------------------------------------


def get_engine(ws: Workspace | None = None) -> EngineClient:
    """The engine client for ``ws`` (see the module docstring); cached per process.

    Raises:
        EngineSettingsError: bad configuration (address, idle timeout).
        EngineManagerError: the shared engine failed to start.
        engine.errors.EngineUnavailable / EngineTimeout: a private engine failed to start.
    """
    from engine.client import EngineClient

    address = configured_address(ws)
    with _lock:
        if address is None:
            address = _shared_or_private(ws)
        client = _clients.get(address)
        if client is None:
            client = EngineClient(address)
            _clients[address] = client
        return client


def workspace_of(dataset: Dataset) -> Workspace | None:
    """The workspace holding ``dataset`` (``<root>/datasets/<id>``); ``None`` for a dataset
    directory outside any workspace."""
    from storage.catalog import DATASETS_DIR, WORKSPACE_DIR, check_root
    from storage.errors import WorkspaceError
    from storage.workspace import Workspace

    parent = dataset.layout.root.parent
    root = parent.parent
    if parent.name != DATASETS_DIR or root.name != WORKSPACE_DIR:
        return None
    try:
        check_root(root)
    except WorkspaceError:
        return None
    return Workspace(root)


def dataset_engine(dataset: Dataset) -> EngineClient:
    """The engine client for work on ``dataset``: `get_engine` of its workspace (a private
    engine for a dataset outside any workspace).

    Raises:
        EngineSettingsError / EngineManagerError / engine.errors.EngineUnavailable: see
            `get_engine`.
    """
    return get_engine(workspace_of(dataset))


def engine_provider(
    where: Workspace | Dataset | None, given: EngineClient | None = None
) -> EngineProvider:
    """``given``, or the engine for ``where`` (a workspace: `get_engine`; a dataset:
    `dataset_engine`), looked up on the first call and remembered for the later ones.

    The call raises what `get_engine` raises.
    """
    found: list[EngineClient] = [] if given is None else [given]

    def provide() -> EngineClient:
        if not found:
            from storage.dataset import Dataset

            if isinstance(where, Dataset):
                found.append(dataset_engine(where))
            else:
                found.append(get_engine(where))
        return found[0]

    return provide


class _LazyEngine:
    """Stands in for an `EngineClient`; gets the real one on first attribute access."""

    def __init__(self, provide: EngineProvider) -> None:
        self._provide = provide

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provide(), name)


def lazy_engine(
    where: Workspace | Dataset | None, given: EngineClient | None = None
) -> EngineClient:
    """``given``, or a stand-in for the engine of ``where`` that looks it up (as
    `engine_provider` does) on its first use: for code that takes a client, not a
    provider."""
    if given is not None:
        return given
    return cast("EngineClient", _LazyEngine(engine_provider(where)))


def _shared_or_private(ws: Workspace | None) -> str:
    global _private
    if ws is not None:
        return acquire_shared_engine(ws)
    if _private is None or not _private.alive():
        from engine.process import start_engine_process

        _private = start_engine_process(master=_master(None))
        atexit.register(_private.stop)
    return _private.address


# -- the shared engine ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """A shared engine, as recorded in its run folder's ``engine.json``."""

    pid: int
    engine_pid: int
    address: str
    started_at: float
    idle_timeout: float
    #: `STATE_STARTING` while the engine boots, `STATE_RUNNING` once it answers.
    state: str = STATE_RUNNING

    def to_json(self) -> bytes:
        """The record file's content."""
        return json.dumps(
            {
                "pid": self.pid,
                "enginePid": self.engine_pid,
                "address": self.address,
                "startedAt": self.started_at,
                "idleTimeout": self.idle_timeout,
                "state": self.state,
            }
        ).encode()

    @classmethod
    def read(cls, path: Path) -> EngineRecord | None:
        """The record at ``path``; ``None`` if absent, malformed or not this user's."""
        data = _read_json(path, owned=True)
        if data is None:
            return None
        try:
            return cls(
                pid=int(data["pid"]),
                engine_pid=int(data["enginePid"]),
                address=str(data["address"]),
                started_at=float(data["startedAt"]),
                idle_timeout=float(data["idleTimeout"]),
                state=str(data.get("state", STATE_RUNNING)),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def write(self, run_dir: Path) -> None:
        """Replace the run folder's record with this one (mode 0600)."""
        atomic_write_bytes(run_dir / RECORD_FILE, self.to_json(), mode=PRIVATE_FILE_MODE)


def _run_dir(ws: Workspace) -> Path:
    path = ws.root / RUN_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def _private_dir(path: Path) -> Path:
    """``path``, created mode 0700 if absent; refused unless it is a real folder of this
    user that nobody else can write to (another user could plant a record naming an
    engine of theirs, or take the locks)."""
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as e:
        raise EngineManagerError(f"cannot create the engine run folder {path}: {e}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise EngineManagerError(f"engine run folder {path} is not a folder of this user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise EngineManagerError(f"engine run folder {path} is writable by other users")
    return path


def user_run_dir() -> Path:
    """The run folder of this user's shared engine (see the module docstring).

    Raises:
        EngineManagerError: it cannot be created, or belongs to another user.
    """
    configured = os.environ.get(ENGINE_RUN_DIR_ENV)
    if configured:
        return _private_dir(Path(configured))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        with contextlib.suppress(OSError):
            st = os.lstat(runtime)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                return _private_dir(Path(runtime) / "odf")
    return _private_dir(Path.home() / ".cache" / "odf")


def engine_run_dir(ws: Workspace) -> Path:
    """The run folder of the shared engine ``ws`` uses: the user's, or the workspace's own
    ``.odf/run/`` when its engine settings (the Spark master) are not the defaults, or
    when the user has no usable default run folder (a container user without a home).

    Raises:
        EngineManagerError: ``$ODF_ENGINE_RUN_DIR`` names a folder that cannot be used.
    """
    if _master(ws) is not None:
        return _run_dir(ws)
    try:
        return user_run_dir()
    except EngineManagerError:
        if os.environ.get(ENGINE_RUN_DIR_ENV):
            raise
        return _run_dir(ws)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _live_record(run_dir: Path) -> EngineRecord | None:
    """The recorded engine if its supervisor lives and it is booting or answering."""
    record = EngineRecord.read(run_dir / RECORD_FILE)
    if record is None or not _pid_alive(record.pid):
        return None
    if record.state != STATE_RUNNING or _port_open(record.address):
        return record
    return None


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.touch(mode=PRIVATE_FILE_MODE)
        os.utime(path)


def _take_lease(run_dir: Path) -> None:
    """Hold a shared flock on ``engine.use`` until `release_lease` / process exit."""
    if run_dir in _leases:
        return
    use = run_dir / USE_FILE
    lease = FileLock(use, shared=True, mode=PRIVATE_FILE_MODE)
    lease.acquire()
    _touch(use)
    if not _leases:
        atexit.register(release_lease)
    _leases[run_dir] = lease


def release_lease() -> None:
    """Drop this process's leases on shared engines (they may then stop when idle)."""
    while _leases:
        _, lease = _leases.popitem()
        _touch(lease.path)
        lease.release()


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def acquire_shared_engine(
    ws: Workspace,
    *,
    idle_timeout: float | None = None,
    master: str | None = None,
    python: str = sys.executable,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
) -> str:
    """The address of the shared engine for ``ws``, started if none runs; takes a lease.

    Args:
        ws: the workspace (`engine_run_dir` picks the user's or its own engine).
        idle_timeout: seconds without users before the engine stops (default: config).
        master: Spark master of a newly started engine (default: config or local[*]).
        python: interpreter running the engine (the supervisor runs on this one).
        start_timeout: seconds to wait for a new (or booting) engine.

    Raises:
        EngineManagerError: the engine did not start (the error holds the log tail), or
            the manager lock stayed busy.
    """
    run_dir = engine_run_dir(ws)
    with file_lock(run_dir / LOCK_FILE, timeout=LOCK_TIMEOUT_S) as locked:
        if not locked:
            raise EngineManagerError(f"engine lock {run_dir / LOCK_FILE} stayed busy")
        record = _live_record(run_dir)
        if record is None:
            (run_dir / RECORD_FILE).unlink(missing_ok=True)
            record = _start_supervisor(
                run_dir,
                idle_timeout if idle_timeout is not None else _idle_timeout(ws),
                master if master is not None else _master(ws),
                python,
                start_timeout,
            )
        elif record.state != STATE_RUNNING:
            # Started by a process that stopped waiting for it (interrupted): wait for it.
            record = _wait_running(
                run_dir, record.pid, lambda: not _pid_alive(record.pid), start_timeout
            )
        # Taken under the manager lock: the supervisor decides to stop only while
        # holding that lock, so it cannot stop between our check and our lease.
        _take_lease(run_dir)
        return record.address


def _start_supervisor(
    run_dir: Path, idle_timeout: float, master: str | None, python: str, timeout: float
) -> EngineRecord:
    project_root = Path(__file__).resolve().parents[1]
    args = [
        sys.executable,
        "-m",
        "node.engine_manager",
        "supervise",
        "--run-dir",
        str(run_dir),
        "--idle-timeout",
        str(idle_timeout),
        "--python",
        python,
    ]
    if master:
        args += ["--master", master]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(project_root), env.get("PYTHONPATH", "")) if p
    )
    with (run_dir / SUPERVISOR_LOG).open("ab") as out:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=run_dir,  # not a workspace: the engine may outlive the one that started it
            start_new_session=True,  # survives this process and its terminal's signals
        )
    # Our child until it exits: reap it then, or a long-lived process (the daemon) would
    # keep a zombie per engine it started, and a zombie looks alive to `_pid_alive`.
    threading.Thread(target=proc.wait, name="engine-supervisor-reaper", daemon=True).start()
    try:
        return _wait_running(run_dir, proc.pid, lambda: proc.returncode is not None, timeout)
    except EngineManagerError:
        with contextlib.suppress(OSError):
            proc.terminate()  # a booting engine's supervisor stops it and exits
        raise


def _wait_running(
    run_dir: Path, pid: int, exited: Callable[[], bool], timeout: float
) -> EngineRecord:
    """Wait until the supervisor ``pid`` records its engine as running and it answers.

    Raises:
        EngineManagerError: the supervisor exited first, or ``timeout`` passed.
    """
    log = run_dir / SUPERVISOR_LOG
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = EngineRecord.read(run_dir / RECORD_FILE)
        if (
            record is not None
            and record.pid == pid
            and record.state == STATE_RUNNING
            and _port_open(record.address)
        ):
            return record
        if exited():
            raise EngineManagerError(f"the engine failed to start; {log}:\n{_log_tail(log)}")
        time.sleep(0.2)
    raise EngineManagerError(f"the engine did not start within {timeout} s; see {log}")


def engine_status(ws: Workspace) -> EngineRecord | None:
    """The shared engine ``ws`` uses, if one runs or boots (see `EngineRecord.state`)."""
    return _live_record(engine_run_dir(ws))


def stop_shared_engine(ws: Workspace, timeout: float = 60.0) -> EngineRecord | None:
    """Stop the shared engine ``ws`` uses (SIGTERM to its supervisor); returns what ran.

    Raises:
        EngineManagerError: it did not stop within ``timeout`` seconds.
    """
    run_dir = engine_run_dir(ws)
    record = EngineRecord.read(run_dir / RECORD_FILE)
    if record is None or not _pid_alive(record.pid):
        (run_dir / RECORD_FILE).unlink(missing_ok=True)
        return None
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(record.pid):
        if time.monotonic() >= deadline:
            raise EngineManagerError(f"engine supervisor {record.pid} did not stop in {timeout} s")
        time.sleep(0.1)
    return record


# -- the supervisor ---------------------------------------------------------------------------


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _last_used(run_dir: Path, started: float) -> float:
    """The last lease taken or dropped, or request started or ended (not before start)."""
    return max(started, _mtime(run_dir / USE_FILE), _mtime(run_dir / ACTIVITY_FILE))


def _still_owned(run_dir: Path, pid: int) -> bool:
    """True while the run folder exists and its record names supervisor ``pid``: a
    deleted folder (its workspace or test gone) or a replaced record means nobody can
    reach this engine through it any more."""
    record = EngineRecord.read(run_dir / RECORD_FILE)
    return record is not None and record.pid == pid


def _supervise(run_dir: Path, idle_timeout: float, master: str | None, python: str) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    me, started = os.getpid(), time.time()
    try:
        # Booting from here on (the imports and the JVM take seconds): say so at once.
        EngineRecord(me, 0, "", started, idle_timeout, STATE_STARTING).write(run_dir)
    except OSError as e:  # the run folder is already gone
        print(f"engine run folder lost: {e}", file=sys.stderr, flush=True)
        return 1
    _touch(run_dir / ACTIVITY_FILE)
    from engine.errors import EngineError
    from engine.process import start_engine_process

    def record(engine: EngineProcess, state: str) -> EngineRecord:
        return EngineRecord(me, engine.process.pid, engine.address, started, idle_timeout, state)

    try:
        engine = start_engine_process(
            master=master,
            log_path=run_dir / ENGINE_LOG,
            python=python,
            activity_path=run_dir / ACTIVITY_FILE,
            on_spawn=lambda e: record(e, STATE_STARTING).write(run_dir),
            abort=lambda: stop.is_set() or not _still_owned(run_dir, me),
        )
    except (EngineError, OSError) as e:
        print(f"engine did not start: {e}", file=sys.stderr, flush=True)
        _forget(run_dir, me)
        return 1
    try:
        record(engine, STATE_RUNNING).write(run_dir)
        return _watch(run_dir, record(engine, STATE_RUNNING), engine.alive, stop)
    except OSError as e:  # the run folder went away under us
        print(f"engine run folder lost: {e}", file=sys.stderr, flush=True)
        return 0
    finally:
        _forget(run_dir, me)
        engine.stop()


def _watch(
    run_dir: Path, record: EngineRecord, alive: Callable[[], bool], stop: threading.Event
) -> int:
    """Poll until the engine dies (1), its owner is gone, it is idle or told to stop (0)."""
    while not stop.wait(SUPERVISOR_POLL_S):
        if not alive():
            return 1
        if not _still_owned(run_dir, record.pid):
            print("engine run folder or record gone: stopping", file=sys.stderr, flush=True)
            return 0
        if time.time() - _last_used(run_dir, record.started_at) < record.idle_timeout:
            continue
        with file_lock(run_dir / LOCK_FILE, timeout=0) as locked:
            if not locked:
                continue  # someone is deciding to reuse us right now
            with file_lock(run_dir / USE_FILE, timeout=0) as unused:
                if unused:
                    _forget(run_dir, record.pid)
                    return 0
    return 0


def _forget(run_dir: Path, pid: int) -> None:
    current = EngineRecord.read(run_dir / RECORD_FILE)
    if current is not None and current.pid == pid:
        (run_dir / RECORD_FILE).unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m node.engine_manager supervise ...`` (started by `acquire_shared_engine`)."""
    ap = argparse.ArgumentParser(prog="odf-engine-supervisor")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("supervise", help="run a shared engine until idle")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S)
    p.add_argument("--master", default=None)
    p.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    return _supervise(args.run_dir, args.idle_timeout, args.master, args.python)


if __name__ == "__main__":
    sys.exit(main())
