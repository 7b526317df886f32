"""A Spark standalone master and one worker that cannot read the node's files.

`start_cluster` starts the master on a free loopback port, then the worker inside its own
user and mount namespaces (``unshare -Urm``) where empty tmpfs cover ``/tmp``, the
folders in ``hide`` (the node's workspaces and checkout) and the user's ``~/.aws``; only
the Python environment (``sys.prefix``, with PySpark's jars) is bound back at its own
path, so executors run the same Python and Spark and see nothing else of the node. Both
run in their own process groups; `SparkCluster.stop` stops them by PID (the worker's
executors are its children, in its group). Memory stays modest: 256 MiB for each daemon,
the executors' own heap as the driver asks (default 1 GiB).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: How long the master and the worker's registration may take.
START_TIMEOUT_S: Final = 90.0
#: Cores and memory the worker offers.
WORKER_CORES: Final = 2
WORKER_MEMORY: Final = "3g"
#: The line of the worker's log that says it registered with the master.
REGISTERED: Final = "Successfully registered with master"


def spark_home() -> Path:
    """The installed PySpark's folder (its ``jars/`` hold Spark)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def namespaces_available() -> str | None:
    """Why the worker cannot be sandboxed here (``None``: it can)."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs none /tmp"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"user and mount namespaces unavailable: {probe.stderr.strip()}"
    return None


@dataclass(frozen=True, slots=True)
class SparkCluster:
    """A running master and worker: the master's URL and both PIDs."""

    master_url: str
    master_pid: int
    worker_pid: int
    log_dir: Path

    def stop(self) -> None:
        """Stop the worker (and its executors), then the master, by PID."""
        for pid in (self.worker_pid, self.master_pid):
            _stop_group(pid)


def _stop_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return done == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _java(main: str, args: Sequence[str]) -> list[str]:
    jars = spark_home() / "jars" / "*"
    return ["java", "-Xmx256m", "-cp", str(jars), main, *args]


def _sandbox_script(hide: Sequence[Path], command: Sequence[str]) -> str:
    """Shell run in the new namespaces: cover ``/tmp`` and ``hide``, bind the venv back.

    The venv is held on a bind under a fresh tmpfs on ``/mnt`` while the folders are
    covered, so it survives whichever of them holds it (a checkout under ``/tmp`` too).
    """
    venv = shlex.quote(str(Path(sys.prefix).resolve()))
    lines = [
        "set -e",
        "mount -t tmpfs tmpfs /mnt",
        "mkdir /mnt/venv",
        f"mount --bind {venv} /mnt/venv",
        "mount -t tmpfs tmpfs /tmp",
    ]
    for folder in [*hide, Path.home() / ".aws"]:
        if folder.is_dir():
            lines.append(f"mount -t tmpfs tmpfs {shlex.quote(str(folder))}")
    lines += [
        f"mkdir -p {venv}",
        f"mount --bind /mnt/venv {venv}",
        "umount -l /mnt/venv",
        "mkdir -p /tmp/spark-work",
        "exec " + shlex.join(command),
    ]
    return "\n".join(lines)


def _wait(what: str, ready: object, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {START_TIMEOUT_S} s (log {log})")
        time.sleep(0.2)


def _spawn(args: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def start_cluster(log_dir: Path, hide: Sequence[Path]) -> SparkCluster:
    """Start the master and the sandboxed worker (see the module docstring).

    Raises:
        RuntimeError: a daemon that exits or is not ready in time (both are stopped).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    # Nothing of the node's S3 credentials: executors get them from the driver's settings.
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # What Spark's launch scripts set; the worker's executor launcher needs it.
        "SPARK_SCALA_VERSION": "2.13",
    }
    port = _free_port()
    master_args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"]
    master_log = log_dir / "master.log"
    master = _spawn(_java("org.apache.spark.deploy.master.Master", master_args), master_log, env)
    url = f"spark://127.0.0.1:{port}"
    worker_args = ["--host", "127.0.0.1", "--webui-port", "0", "--cores", str(WORKER_CORES)]
    worker_args += ["--memory", WORKER_MEMORY, "--work-dir", "/tmp/spark-work", url]
    script = _sandbox_script(hide, _java("org.apache.spark.deploy.worker.Worker", worker_args))
    worker_log = log_dir / "worker.log"
    try:
        _wait("master", lambda: _port_open(port), master, master_log)
        worker = _spawn(["unshare", "-Urm", "sh", "-c", script], worker_log, env)
    except BaseException:
        _stop_group(master.pid)
        raise
    try:
        _wait("worker", lambda: REGISTERED in worker_log.read_text(), worker, worker_log)
    except BaseException:
        _stop_group(worker.pid)
        _stop_group(master.pid)
        raise
    return SparkCluster(url, master.pid, worker.pid, log_dir)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False
