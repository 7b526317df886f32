"""``odf pull`` with a libp2p peer address or a remote dataset ID, against real daemons.

Daemons run in this process (each libp2p host in its own trio thread); the CLI runs in
a worker thread (it starts its own asyncio loop, as in a separate ``odf`` process).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from fbs.did import DatasetId
from node.cli import main as odf
from node.cli_util import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from node.daemon.config import NodeConfig
from p2p.head_store import HeadStore
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.conftest import running
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CFG = NodeConfig(http_port=0, head_poll_interval_s=0.1, pull_retry_delay_s=0.1)
WAIT_S = 30.0


async def pull(ws: Workspace, *argv: str) -> int:
    """``odf --workspace WS pull ARGV... --no-progress`` in a worker thread."""
    args = ["--workspace", str(ws.root.parent), "pull", *argv, "--no-progress"]
    return await asyncio.to_thread(odf, args)


async def signed(ws: Workspace, did: DatasetId) -> None:
    """Wait until the owner's daemon signed the current head (bounded)."""
    store = HeadStore.for_workspace(ws.root)
    head = ws.get(did).head()
    for _ in range(int(WAIT_S / 0.05)):
        record = store.get(did)
        if record is not None and record.head == head:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the owner did not sign its head")


async def test_pull_from_peer_address_clones_then_updates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "pub.data", tmp_path / "s1", slices=3, checkpoints=True)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    async with running(wa, CFG) as a:
        await signed(wa, did)
        ref = f"{a.host.addrs[0]}/{did.to_did_odf()}"
        assert await pull(wb, ref, "--as", "copy", "--require-signed") == EXIT_OK
        out = capsys.readouterr().out
        assert "Cloned copy" in out and "(signed head)" in out
        entry = wb.resolve("copy")
        assert entry.id == did and wb.get(did).head() == ds.head()

        assert await pull(wb, ref) == EXIT_OK
        assert "up to date" in capsys.readouterr().out

        add_slices(ds, tmp_path / "s2", 2)
        await signed(wa, did)
        # The peer address without the DID suffix, the dataset given by --dataset.
        assert await pull(wb, a.host.addrs[0], "--dataset", did.to_did_odf()) == EXIT_OK
        assert "Updated copy" in capsys.readouterr().out
        assert wb.get(did).head() == ds.head()
    report = verify_integrity(wb.get(did))
    assert report.ok, report.problems
    held = HeadStore.for_workspace(wb.root).get(did)
    assert held is not None and held.head == ds.head()
    assert not wb.keys.has(did)


async def test_pull_did_resolved_through_the_running_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "far.away", tmp_path / "s", slices=2)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    async with running(wa, CFG) as a:
        await signed(wa, did)
        # B's node knows A (bootstrap) but does not follow anything: the CLI pull asks
        # it who serves the DID, then pulls from those peers itself.
        cfg_b = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],))
        async with running(wb, cfg_b) as b:
            for _ in range(int(WAIT_S / 0.05)):
                if a.host.peer_id in b.host.peers():
                    break
                await asyncio.sleep(0.05)
            assert await pull(wb, did.to_did_odf()) == EXIT_OK
            out = capsys.readouterr().out
            assert "Cloned" in out and "(signed head)" in out
            assert wb.get(did).head() == ds.head()
    assert verify_integrity(wb.get(did)).ok


async def test_pull_unknown_did_without_a_node_or_bad_peer_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "elsewhere", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    did = state.dataset_id.to_did_odf()
    assert await pull(wb, did) == EXIT_NOT_FOUND
    assert "no node is running" in capsys.readouterr().err
    # A peer address with no dataset named is a usage error, not a network attempt.
    assert await pull(wb, "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWLRPJAA5o6") == EXIT_USAGE
    # A reachable address with nobody listening: nothing is created.
    async with running(wa, CFG) as a:
        addr = a.host.addrs[0]
    assert await pull(wb, f"{addr}/{did}") == EXIT_NOT_FOUND
    assert wb.list() == []
