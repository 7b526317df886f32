"""Attestations come with a replica pulled over libp2p (``/odf/exchange/attestations/1.0.0``).

Real libp2p hosts on loopback: A serves a dataset (the object exchange) and the
attestations a validator signed for its blocks; ``odf pull /ip4/.../p2p/A/did:odf:...``
(an ``odf`` process) clones it with them, and ``odf verify --trust 1`` accepts the clone's
head. A peer that serves a tampered attestation has it dropped, and is charged for it
once its answer ends (a ban: only a hostile node serves one); the good ones are kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fbs.keys import KeyPair
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import AttestationStore
from p2p.errors import TransferError
from p2p.libp2p.exchange import ExchangeServer, FrameType, read_frame_header
from p2p.libp2p.exchange.attestations import (
    ATTESTATION_LIMITS,
    ATTESTATION_PROTOCOL,
    AttestationServer,
    peer_attestations,
)
from p2p.libp2p.exchange.wire import write_json
from p2p.libp2p.host import P2PHost
from storage.workspace import Workspace
from tests.node.test_replica_attestations import attest_all
from tests.p2p.sync_helpers import make_dataset, new_workspace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


async def odf(ws: Workspace, *argv: str) -> tuple[int, str]:
    """``odf --workspace WS ARGV...`` as a process; its exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "node.cli",
        "--workspace",
        str(ws.root.parent),
        *argv,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 150)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[Workspace, P2PHost]]:
    """A's workspace (``prices``, two data blocks, both attested) and its host."""
    wa = new_workspace(tmp_path / "a")
    make_dataset(wa, "prices", tmp_path / "s1", 2)
    assert attest_all(wa, "prices", KeyPair.generate()) == 2
    host = P2PHost()
    ExchangeServer(wa).register(host)
    AttestationServer(AttestationStore.for_workspace(wa)).register(host)
    async with host:
        yield wa, host


async def test_a_clone_over_libp2p_brings_the_attestations(
    server: tuple[Workspace, P2PHost], tmp_path: Path
) -> None:
    wa, host = server
    wb = new_workspace(tmp_path / "b")
    did = wa.resolve("prices").id.to_did_odf()
    code, out = await odf(wb, "pull", f"{host.addrs[0]}/{did}", "--as", "prices", "--no-progress")
    assert code == 0, out
    assert "2 attestation(s)" in out, out
    code, out = await odf(wb, "verify", "--trust", "1", "prices")
    assert code == 0, out
    held = AttestationStore.for_workspace(wb).attestations(wb.resolve("prices").id)
    assert sorted(a.digest for a in held) == sorted(
        a.digest for a in AttestationStore.for_workspace(wa).attestations(wa.resolve("prices").id)
    )


def _tampered(att: Attestation) -> Attestation:
    """``att`` with its verdict turned, the signature left as it was."""
    return dataclasses.replace(att, verdict=Verdict.DIVERGED, detail="outputDataHash")


async def test_a_tampered_attestation_is_dropped(tmp_path: Path) -> None:
    from node.remote.attestations import accept_verified

    wa = new_workspace(tmp_path / "a")
    ds = make_dataset(wa, "prices", tmp_path / "s1", 1)
    did = wa.resolve("prices").id
    h, _raw, block = next(iter(ds.iter_blocks()))
    good = sign_attestation(
        KeyPair.generate(),
        dataset_id=did,
        block_hash=h,
        sequence_number=block.sequence_number,
        verdict=Verdict.REPRODUCED,
        engine="spark-test",
    )
    served = [_tampered(good), good]
    hostile, client = P2PHost(), P2PHost()
    AttestationServer(provider=lambda _did: served).register(hostile)
    async with hostile, client:
        await client.connect(hostile.addrs[0])
        got = await peer_attestations(client, hostile.peer_id, did)
        assert got == [good]
        assert client.scores.is_banned(hostile.peer_id)  # charged for the bad one
    assert accept_verified(wa, got) == 1
    assert accept_verified(wa, got) == 0  # the same again is a duplicate


async def test_a_malformed_request_is_refused(tmp_path: Path) -> None:
    served: list[Attestation] = []
    server, client = P2PHost(), P2PHost()
    AttestationServer(provider=lambda _did: served).register(server)

    async def ask(body: dict[str, object], ftype: int) -> int:
        stream = await client.new_stream_trio(server.peer_id, ATTESTATION_PROTOCOL)
        try:
            await write_json(stream, ftype, body, ATTESTATION_LIMITS)
            answer, _length = await read_frame_header(stream, ATTESTATION_LIMITS)
            return answer
        finally:
            await stream.close()

    async with server, client:
        await client.connect(server.addrs[0])
        # A dataset that is not a DID: one ERROR frame.
        assert await client.run_trio(ask, {"dataset": "nope"}, FrameType.REQUEST) == (
            FrameType.ERROR
        )
        # Not a request at all: the stream is reset, nothing is answered.
        with pytest.raises(TransferError):
            await client.run_trio(ask, {"dataset": "x"}, FrameType.HEAD)
