"""The node daemon in-process: config, run files, HTTP endpoints, remote references."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import aiohttp
import pytest

from node.daemon.config import NodeConfig, load_config, parse_config
from node.daemon.service import (
    RUN_FILE,
    NodeAlreadyRunning,
    NodeDaemon,
    NodeNotRunning,
    parse_remote_ref,
    read_run_info,
    resolve_remote,
)
from node.errors import UsageError
from node.http.auth import bearer_headers, read_token, token_path
from p2p.sync import pull_dataset
from storage.verify import verify_integrity
from tests.p2p.sync_helpers import make_dataset, new_workspace, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CFG = NodeConfig(http_port=0, head_poll_interval_s=0.1, pull_retry_delay_s=0.1)


# -- config ------------------------------------------------------------------------------


def test_config_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(
        "listen: /ip4/127.0.0.1/tcp/4001\n"
        "bootstrap: []\n"
        "http: {host: 127.0.0.1, port: 9000}\n"
        "follow: [all]\n"
        "allow_ingest: false\n"
        "log_format: text\n"
    )
    cfg = load_config(path)
    assert cfg.listen == ("/ip4/127.0.0.1/tcp/4001",) and cfg.http_port == 9000
    assert cfg.follow_all and not cfg.allow_ingest and cfg.log_format == "text"
    cfg2 = cfg.with_overrides(http_port=0, follow=["x"], mdns=None)
    assert cfg2.http_port == 0 and cfg2.follow == ("x",) and cfg2.mdns is False
    assert cfg == load_config(path)  # frozen: overrides make copies


@pytest.mark.parametrize(
    "doc",
    [
        {"listen": "x", "bogus": 1},
        {"http": {"port": 70000}},
        {"http": {"hots": "a"}},
        {"log_level": "loud"},
        {"follow": [1]},
        {"mdns": "yes"},
        {"head_poll_interval_s": 0},
        {"ban_duration_s": 0},
        {"gossip_rate_per_peer": True},
        {"gossip_burst_per_peer": 2.5},
        ["not", "a", "mapping"],
    ],
)
def test_bad_config_is_a_usage_error(doc: object) -> None:
    with pytest.raises(UsageError):
        parse_config(doc)


def test_peer_limits_are_configurable(tmp_path: Path) -> None:
    cfg = parse_config(
        {"ban_duration_s": 60, "gossip_rate_per_peer": 5, "gossip_burst_per_peer": 9}
    )
    assert (cfg.ban_duration_s, cfg.gossip_rate_per_peer, cfg.gossip_burst_per_peer) == (60, 5, 9)
    daemon = NodeDaemon(new_workspace(tmp_path / "ws"), cfg, write_run_file=False)
    assert daemon.scores.policy.ban_duration_s == 60
    gossip = daemon.host.config.gossip
    assert (gossip.rate_per_peer, gossip.burst_per_peer) == (5, 9)


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("listen: [unclosed\n")
    with pytest.raises(UsageError):
        load_config(tmp_path / "bad.yaml")


def test_parse_remote_ref() -> None:
    did = "did:odf:fed01" + "ab" * 32
    peer = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWC4X4KKSaongvVW74gdLEfr7sGTatKxeFoPW3zoY491ZT"
    assert parse_remote_ref("odf+http://h:1/ds").kind == "http"
    assert parse_remote_ref("http://h:1/ds").url == "http://h:1/ds"
    r = parse_remote_ref(f"{peer}/{did}")
    assert r.kind == "libp2p" and r.addr == peer and r.dataset == did
    assert parse_remote_ref(peer, did).dataset == did
    assert parse_remote_ref(did).kind == "did"
    for bad in ("ftp://x", "/ip4/1.2.3.4/tcp/1", peer, "did:odf:zz", "name"):
        with pytest.raises(UsageError):
            parse_remote_ref(bad)


# -- a running daemon --------------------------------------------------------------------


async def test_run_file_lock_and_http_endpoints(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "n")
    ds = make_dataset(ws, "mine", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    daemon = NodeDaemon(ws, CFG)
    await daemon.start()
    try:
        info = read_run_info(ws)
        assert info is not None and info.peer_id == daemon.host.peer_id
        assert info.http_url == daemon.http_url and info.addrs == tuple(daemon.host.addrs)
        with pytest.raises(NodeAlreadyRunning):
            await NodeDaemon(ws, CFG).start()
        assert read_run_info(ws) == info  # the failed start left the file alone
        token = read_token(ws.root)  # created on first start, mode 0600
        assert token and (token_path(ws.root).stat().st_mode & 0o777) == 0o600
        async with aiohttp.ClientSession(headers=bearer_headers(token)) as s:
            async with s.get(daemon.http_url + "/api/status") as r:
                status = await r.json()
            assert status["peerId"] == daemon.host.peer_id and status["datasets"] == 1
            async with s.post(daemon.http_url + "/api/follow", json={"dataset": "mine"}) as r:
                assert r.status == 200
                assert (await r.json())["followed"] == state.dataset_id.to_did_odf()
            async with s.post(daemon.http_url + "/api/follow", json={"dataset": "nope"}) as r:
                assert r.status == 404  # no such dataset here (a DID may name one not held)
            async with s.post(daemon.http_url + "/api/follow", data=b"{") as r:
                assert r.status == 400
            async with s.get(daemon.http_url + "/api/follow") as r:
                assert (await r.json())["follow"] == [state.dataset_id.to_did_odf()]
            async with s.delete(
                daemon.http_url + "/api/follow", json={"dataset": state.dataset_id.to_did_odf()}
            ) as r:
                assert (await r.json())["removed"] is True
            async with s.get(daemon.http_url + "/api/network/not-a-did") as r:
                assert r.status == 400
            async with s.get(daemon.http_url + "/api/peers") as r:
                assert await r.json() == []
            # The owner signed its head on start: the record is served over HTTP too.
            async with s.get(daemon.http_url + "/mine/refs/head.sig") as r:
                assert r.status == 200
                assert json.loads(await r.read())["head"] == str(ds.head())
    finally:
        await daemon.stop()
    assert not (ws.root / RUN_FILE).exists()
    assert read_run_info(ws) is None


async def test_owned_head_is_signed_on_every_commit(tmp_path: Path) -> None:
    from p2p.head_store import HeadStore
    from tests.p2p.sync_helpers import add_slices

    ws = new_workspace(tmp_path / "n")
    ds = make_dataset(ws, "mine", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    store = HeadStore.for_workspace(ws.root)
    async with NodeDaemon(ws, CFG):
        for i in range(2):
            add_slices(ds, tmp_path / f"more{i}", 1)
            await wait_for(
                lambda: (r := store.get(state.dataset_id)) is not None and r.head == ds.head(),
                "the record of the new head",
            )
            held = store.get(state.dataset_id)
            assert held is not None
            held.verify()


async def test_resolve_remote_url_peer_and_did(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "shared", tmp_path / "s", slices=2)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    with pytest.raises(NodeNotRunning):
        async with resolve_remote(did.to_did_odf(), wb):
            pass
    async with NodeDaemon(wa, CFG) as a:
        # By URL.
        async with resolve_remote(f"{a.http_url}/shared", wb) as remote:
            assert remote.head_record is not None and remote.head_record.head == ds.head()
            result = await pull_dataset(
                wb, remote.sources, alias=remote.alias, head_record=remote.head_record
            )
        assert result.new_head == ds.head() and result.alias == "shared"
        wb.delete("shared")
        wb2 = new_workspace(tmp_path / "b2")
        # By peer address + DID.
        async with resolve_remote(a.host.addrs[0], wb2, dataset=did.to_did_odf()) as remote:
            assert remote.dataset_id == did and remote.head_record is not None
            await pull_dataset(wb2, remote.sources, dataset_id=did, head_record=remote.head_record)
        assert verify_integrity(wb2.get(did)).ok
        # By DID, through the running node of the workspace (its peers know it).
        wc = new_workspace(tmp_path / "c")
        cfg_c = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],))
        async with NodeDaemon(wc, cfg_c), resolve_remote(did.to_did_odf(), wc) as remote:
            assert remote.head_record is not None
            assert remote.head_record.head == ds.head()
            await pull_dataset(wc, remote.sources, dataset_id=did, head_record=remote.head_record)
        assert wc.get(did).head() == ds.head()
