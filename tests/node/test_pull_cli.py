"""``odf pull`` through the use-case layer, on real processes' code paths (`node.cli.main`):
an ingest source that cannot be reached is unavailable (7) like any unreachable source,
and a target that fails its transfer or source does not stop the others."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from node.cli import main
from node.cli_util import EXIT_OK, EXIT_UNAVAILABLE
from storage.workspace import Workspace

MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: polled
  kind: Root
  metadata:
  - kind: SetPollingSource
    fetch:
      kind: Url
      url: {url}
    read:
      kind: Csv
      header: true
      schema:
      - city STRING
      - population BIGINT
    merge:
      kind: Append
"""


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def polled(ws: Workspace, tmp_path: Path) -> tuple[Path, str]:
    """A workspace whose root ``polled`` polls a URL nobody answers; that URL."""
    url = f"http://127.0.0.1:{_closed_port()}/cities.csv"
    manifest = tmp_path / "polled.yaml"
    manifest.write_text(MANIFEST.format(url=url), encoding="utf-8")
    project = ws.root.parent
    assert main(["--workspace", str(project), "add", str(manifest)]) == EXIT_OK
    return project, url


def test_an_unreachable_polling_source_is_unavailable(
    polled: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    project, url = polled
    capsys.readouterr()
    assert main(["--workspace", str(project), "pull", "polled"]) == EXIT_UNAVAILABLE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("odf: error: ") and url in line


def test_a_failed_target_does_not_stop_the_others(
    polled: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    project, _url = polled
    node = f"http://127.0.0.1:{_closed_port()}/x"
    capsys.readouterr()
    argv = ["--workspace", str(project), "pull", node, "polled", "--no-progress"]
    assert main(argv) == EXIT_UNAVAILABLE
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(x.startswith("odf: error: ") for x in lines), lines
    assert node in lines[0] and "cities.csv" in lines[1]
