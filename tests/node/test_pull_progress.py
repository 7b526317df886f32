"""``odf pull`` shows each dataset's pull on the terminal's status line, and nothing piped.

Real ``odf`` processes with stderr on a pseudo-terminal: a derivative's pull (the
transform step; up to date here, so no engine is started) and a clone over libp2p from a
real host on loopback (the transfer). With ``--no-progress`` (global or the command's) or
with stderr piped, no status line and no progress lines are written.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from p2p.libp2p.exchange import ExchangeServer
from p2p.libp2p.host import P2PHost
from storage.workspace import Workspace
from tests.node.test_progress import odf_exe, run_on_terminal
from tests.p2p.sync_helpers import make_dataset, new_workspace

pytestmark = pytest.mark.timeout(180)

EXAMPLES = Path(__file__).resolve().parents[2] / "node" / "examples"
DERIVATIVE = "demo.big-cities"


def odf_piped(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    env.pop("ODF_NO_PROGRESS", None)
    return subprocess.run([odf_exe(), *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def with_derivative(tmp_path: Path) -> Path:
    assert odf_piped(tmp_path, "init").returncode == 0
    manifests = [str(EXAMPLES / "city-populations.yaml"), str(EXAMPLES / "big-cities.yaml")]
    added = odf_piped(tmp_path, "add", *manifests)
    assert added.returncode == 0, added.stderr
    return tmp_path


def test_a_derivative_pull_shows_its_step_on_a_terminal_only(with_derivative: Path) -> None:
    ws = with_derivative
    code, drawn = run_on_terminal(ws, "pull", DERIVATIVE)
    assert code == 0, drawn
    assert f"odf: transforming {DERIVATIVE}" in drawn
    assert drawn.endswith("\r\x1b[2K")  # erased when the step ended
    for quiet in (("--no-progress", "pull", DERIVATIVE), ("pull", DERIVATIVE, "--no-progress")):
        code, drawn = run_on_terminal(ws, *quiet)
        assert code == 0 and drawn == "", drawn
    piped = odf_piped(ws, "pull", DERIVATIVE)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    assert "up-to-date" in piped.stdout


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, P2PHost]]:
    """A host on loopback serving ``prices`` (3 slices); the dataset's DID."""
    wa = new_workspace(tmp_path / "a")
    make_dataset(wa, "prices", tmp_path / "s1", 3)
    host = P2PHost()
    ExchangeServer(wa).register(host)
    async with host:
        yield wa.resolve("prices").id.to_did_odf(), host


@pytest.mark.anyio
async def test_a_clone_over_libp2p_shows_its_transfer_on_a_terminal_only(
    served: tuple[str, P2PHost], tmp_path: Path
) -> None:
    did, host = served
    source = f"{host.addrs[0]}/{did}"
    on_terminal, piped_to = new_workspace(tmp_path / "t"), new_workspace(tmp_path / "p")
    code, drawn = await asyncio.to_thread(
        run_on_terminal, _root(on_terminal), "pull", source, "--as", "prices"
    )
    assert code == 0, drawn
    assert f"odf: pulling {did[:13]}...{did[-8:]} over libp2p" in drawn
    piped = await asyncio.to_thread(odf_piped, _root(piped_to), "pull", source, "--as", "prices")
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    assert "prices" in piped.stdout
    assert piped_to.get("prices").head() == on_terminal.get("prices").head()


def _root(ws: Workspace) -> Path:
    return ws.root.parent
