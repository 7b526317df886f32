"""``odf pull --all`` on a workspace holding replicas that have no reachable source.

Workspace B (real ``odf`` processes) holds its own root and a derivative reading it, a
replica cloned by peer address from a real libp2p host (no pull alias), and, in the last
test, a replica cloned from a node URL whose server is then gone. With no node running
on B:

- the DID-cloned replica gets one ``odf: warning:`` line naming it and what to do, the
  other datasets are pulled, and the exit code is 0 (nothing failed);
- named explicitly, the same replica is an error (exit 3, one line);
- a pull alias that no longer answers is a real failure: exit 7, the others still pulled.
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
from tests.node.test_progress import odf_exe
from tests.p2p.sync_helpers import make_dataset, new_workspace, serve_workspace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

EXAMPLES = Path(__file__).resolve().parents[2] / "node" / "examples"


def odf(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ODF_WORKSPACE": str(ws), "ODF_NO_PROGRESS": "1"}
    return subprocess.run([odf_exe(), *args], env=env, capture_output=True, text=True, timeout=120)


async def odf_async(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(odf, ws, *args)


@pytest.fixture
async def workspace_b(tmp_path: Path) -> AsyncIterator[tuple[Path, Workspace]]:
    """B: its own root and derivative, and ``prices`` cloned by peer address from A's
    host (stopped when the fixture yields); A's workspace."""
    wa = new_workspace(tmp_path / "a")
    make_dataset(wa, "prices", tmp_path / "s1", 2)
    b = tmp_path / "b"
    b.mkdir()
    assert odf(b, "init").returncode == 0
    manifests = [str(EXAMPLES / "city-populations.yaml"), str(EXAMPLES / "big-cities.yaml")]
    assert odf(b, "add", *manifests).returncode == 0
    host = P2PHost()
    ExchangeServer(wa).register(host)
    async with host:
        did = wa.resolve("prices").id.to_did_odf()
        cloned = await odf_async(b, "pull", f"{host.addrs[0]}/{did}", "--as", "prices")
        assert cloned.returncode == 0, cloned.stderr
    yield b, wa


async def test_a_replica_with_nowhere_to_look_is_named_and_passed_by(
    workspace_b: tuple[Path, Workspace],
) -> None:
    b, _wa = workspace_b
    pulled = await odf_async(b, "pull", "--all")
    assert pulled.returncode == 0, pulled.stderr
    warnings = pulled.stderr.splitlines()
    assert len(warnings) == 1, pulled.stderr
    assert warnings[0].startswith("odf: warning: prices: not updated: a replica of did:odf:")
    assert "`odf node run`" in warnings[0]
    assert "demo.city-populations: up-to-date (no polling source)" in pulled.stdout
    assert "demo.big-cities: up-to-date" in pulled.stdout
    named = await odf_async(b, "pull", "prices")
    assert named.returncode == 3
    assert named.stderr.startswith("odf: error: prices is a replica of did:odf:")
    assert len(named.stderr.splitlines()) == 1


async def test_a_pull_alias_that_no_longer_answers_is_a_failure(
    workspace_b: tuple[Path, Workspace], tmp_path: Path
) -> None:
    b, wa = workspace_b
    make_dataset(wa, "rates", tmp_path / "s2", 1)
    async with serve_workspace(wa) as url:
        cloned = await odf_async(b, "pull", f"{url}/rates")
        assert cloned.returncode == 0, cloned.stderr
    pulled = await odf_async(b, "pull", "--all")
    assert pulled.returncode == 7, pulled.stderr
    errors = [line for line in pulled.stderr.splitlines() if line.startswith("odf: error:")]
    assert len(errors) == 1 and f"{url}/rates" in errors[0], pulled.stderr
    assert "odf: warning: prices: not updated" in pulled.stderr
    assert "demo.big-cities: up-to-date" in pulled.stdout
