"""Recorded Smart Transfer Protocol sequences: the server must answer byte for byte.

Each file in ``fixtures/smart_transfer/`` is one WebSocket conversation with a node
serving the reproducible ``fixture`` dataset (`tests.p2p.smart_fixtures`): the client's
messages, written by hand from the protocol description (odf-format.md 4.3: snake_case
serde JSON, externally tagged results, a gzip tar batch as an array of byte values), the
server's replies as recorded, object uploads (``put``) and the closing frame. ``{base}``
stands for the dataset base URL, which holds the server's port.

To record again after a deliberate change of the server's answers:
``ODF_RECORD_SMART_FIXTURES=1 pytest tests/p2p/test_smart_recorded.py`` (then review the
diff of the files).
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fbs.multiformats import Multihash
from node.http.api import HttpApiConfig
from node.http.auth import bearer_headers
from storage.workspace import Workspace
from tests.p2p.smart_fixtures import (
    CHECKPOINT_2,
    SLICE_1,
    SLICE_2,
    fixture_blocks,
    install_fixture,
)
from tests.p2p.sync_helpers import new_workspace, serve_workspace

FIXTURES = Path(__file__).parent / "fixtures" / "smart_transfer"
RECORD = os.environ.get("ODF_RECORD_SMART_FIXTURES") == "1"
TOKEN = "recorded-sequence-token-0123456789"
OBJECTS = {"SLICE_1": SLICE_1, "SLICE_2": SLICE_2, "CHECKPOINT_2": CHECKPOINT_2}


def _mb(data: bytes) -> str:
    return Multihash.sha3_256(data).to_multibase()


def _file(kind: str, data: bytes) -> str:
    return f'{{"object_type":"{kind}","physical_hash":"{_mb(data)}","size":{len(data)}}}'


def _client_batch(blocks: list[tuple[Multihash, bytes]]) -> str:
    """A client's ``MetadataBlocksBatch`` JSON, built by hand (tar + gzip, as kamu does)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for h, raw in blocks:
            info = tarfile.TarInfo(h.to_multibase())
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    payload = gzip.compress(buf.getvalue(), mtime=0)
    return (
        f'{{"num_blocks":{len(blocks)},"media_type":"application/tar+gzip",'
        f'"encoding":"raw","payload":[{",".join(str(b) for b in payload)}]}}'
    )


def scenarios(blocks: list[tuple[Multihash, bytes]]) -> dict[str, dict[str, Any]]:
    """The conversations, client side (server replies are recorded)."""
    h = [b[0].to_multibase() for b in blocks]
    pull_objects = (
        f'{{"object_files":[{_file("DataSlice", SLICE_2)},{_file("Checkpoint", CHECKPOINT_2)}]}}'
    )
    plan4 = '"transfer_plan":{"num_blocks":4,"num_objects":1,"num_records":10,'
    return {
        "pull_clone": {
            "description": "clone: whole chain in one batch, then download URLs",
            "setup": 5,
            "path": "fixture/pull",
            "steps": [
                {"client": '{"begin_after":null,"stop_at":null,"force_update_if_diverged":false}'},
                {"server": None},
                {"client": "{}"},
                {"server": None},
                {"client": f'{{"object_files":[{_file("DataSlice", SLICE_1)}]}}'},
                {"server": None},
                {"client": pull_objects},
                {"server": None},
                {"close": 1000},
            ],
        },
        "pull_update": {
            "description": "update: blocks after the client's head up to a given stop_at",
            "setup": 5,
            "path": "fixture/pull",
            "steps": [
                {
                    "client": f'{{"begin_after":"{h[2]}","stop_at":"{h[4]}",'
                    '"force_update_if_diverged":false}'
                },
                {"server": None},
                {"client": "{}"},
                {"server": None},
                {"close": 1000},
            ],
        },
        "pull_up_to_date": {
            "description": "nothing new: an empty plan, the client closes",
            "setup": 5,
            "path": "fixture/pull",
            "steps": [
                {
                    "client": f'{{"begin_after":"{h[4]}","stop_at":null,'
                    '"force_update_if_diverged":false}'
                },
                {"server": None},
                {"close": 1000},
            ],
        },
        "pull_invalid_interval": {
            "description": "begin_after not in the chain: Err InvalidInterval",
            "setup": 5,
            "path": "fixture/pull",
            "steps": [
                {
                    "client": f'{{"begin_after":"{_mb(b"elsewhere")}","stop_at":null,'
                    '"force_update_if_diverged":false}'
                },
                {"server": None},
                {"close": 1000},
            ],
        },
        "pull_force_diverged": {
            "description": "begin_after not in the chain, with force: the whole chain",
            "setup": 5,
            "path": "fixture/pull",
            "steps": [
                {
                    "client": f'{{"begin_after":"{_mb(b"elsewhere")}","stop_at":null,'
                    '"force_update_if_diverged":true}'
                },
                {"server": None},
                {"client": "{}"},
                {"server": None},
                {"close": 1000},
            ],
        },
        "push_new_dataset": {
            "description": "push creates 'fresh' from its Seed; one object uploaded; confirmed",
            "setup": 0,
            "path": "fresh/push",
            "auth": True,
            "steps": [
                {
                    "client": '{"current_head":null,' + plan4 + '"bytes_in_raw_blocks":0,'
                    '"bytes_in_raw_objects":0},"force_update_if_diverged":false,'
                    '"visibility_for_created_dataset":"Private"}'
                },
                {"server": None},
                {"client": f'{{"new_blocks":{_client_batch(blocks[:4])}}}'},
                {"server": None},
                {
                    "client": f'{{"object_files":[{_file("DataSlice", SLICE_1)}],'
                    '"is_truncated":false}'
                },
                {"server": None},
                {"put": f"data/{_mb(SLICE_1)}", "body": "SLICE_1", "status": 201},
                {"client": '{"details":{"Running":{"uploaded_objects_count":1}}}'},
                {"client": '{"details":"Complete"}'},
                {"client": "{}"},
                {"server": None},
                {"close": 1000},
            ],
            "after": {"alias": "fresh", "head": h[3]},
        },
        "push_update_skip_upload": {
            "description": "update: one object already there (SkipUpload), two uploaded",
            "setup": 4,
            "path": "fixture/push",
            "auth": True,
            "steps": [
                {
                    "client": f'{{"current_head":"{h[3]}","transfer_plan":{{"num_blocks":1,'
                    '"num_objects":2,"num_records":12,"bytes_in_raw_blocks":0,'
                    '"bytes_in_raw_objects":0},"force_update_if_diverged":false,'
                    '"visibility_for_created_dataset":"Private"}'
                },
                {"server": None},
                {"client": f'{{"new_blocks":{_client_batch(blocks[4:])}}}'},
                {"server": None},
                {
                    "client": f'{{"object_files":[{_file("DataSlice", SLICE_1)},'
                    f"{_file('DataSlice', SLICE_2)},{_file('Checkpoint', CHECKPOINT_2)}],"
                    '"is_truncated":false}'
                },
                {"server": None},
                {"put": f"data/{_mb(SLICE_2)}", "body": "SLICE_2", "status": 201},
                {"put": f"checkpoints/{_mb(CHECKPOINT_2)}", "body": "CHECKPOINT_2", "status": 201},
                {"client": '{"details":"Complete"}'},
                {"client": "{}"},
                {"server": None},
                {"close": 1000},
            ],
            "after": {"alias": "fixture", "head": h[4]},
        },
        "push_invalid_head": {
            "description": "the client's idea of the head is stale: Err InvalidHead",
            "setup": 5,
            "path": "fixture/push",
            "auth": True,
            "steps": [
                {
                    "client": f'{{"current_head":"{h[3]}","transfer_plan":{{"num_blocks":1,'
                    '"num_objects":0,"num_records":0,"bytes_in_raw_blocks":0,'
                    '"bytes_in_raw_objects":0},"force_update_if_diverged":false,'
                    '"visibility_for_created_dataset":"Private"}'
                },
                {"server": None},
                {"close": 1000},
            ],
            "after": {"alias": "fixture", "head": h[4]},
        },
        "push_seed_overwrite": {
            "description": "a chain from a Seed onto an existing dataset: closed with "
            "SeedBlockOverwriteRestricted",
            "setup": 2,
            "path": "fixture/push",
            "auth": True,
            "steps": [
                {
                    "client": f'{{"current_head":"{h[1]}","transfer_plan":{{"num_blocks":2,'
                    '"num_objects":0,"num_records":0,"bytes_in_raw_blocks":0,'
                    '"bytes_in_raw_objects":0},"force_update_if_diverged":false,'
                    '"visibility_for_created_dataset":"Private"}'
                },
                {"server": None},
                {"client": f'{{"new_blocks":{_client_batch(blocks[:2])}}}'},
                {"close": 1011, "reason": None},
            ],
            "after": {"alias": "fixture", "head": h[1]},
        },
    }


async def _converse(url: str, doc: dict[str, Any], record: bool) -> None:
    """Play ``doc``'s client steps against the node at ``url``; check (or fill in) the rest."""
    base = f"{url}/{doc['path'].rsplit('/', 1)[0]}/"
    auth = bearer_headers(TOKEN) if doc.get("auth") else {}
    headers = {"x-odf-smtp-version": "1", **auth}
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(f"{url}/{doc['path']}", headers=headers, autoclose=False) as ws,
    ):
        for i, step in enumerate(doc["steps"]):
            where = f"{doc['name']} step {i}"
            if "client" in step:
                await ws.send_str(step["client"].replace("{base}", base))
            elif "put" in step:
                body = OBJECTS[step["body"]]
                async with s.put(base + step["put"], data=body, headers=auth) as r:
                    assert r.status == step["status"], where
            elif "server" in step:
                msg = await ws.receive(timeout=20)
                assert msg.type == aiohttp.WSMsgType.TEXT, (where, msg)
                text = msg.data.replace(base, "{base}")
                if record:
                    step["server"] = text
                else:
                    assert text == step["server"], where  # byte for byte
            else:
                if step["close"] == 1000:
                    await ws.close()
                    continue
                msg = await ws.receive(timeout=20)
                assert msg.type == aiohttp.WSMsgType.CLOSE, (where, msg)
                assert msg.data == step["close"], where
                if record:
                    step["reason"] = msg.extra
                else:
                    assert msg.extra == step["reason"], where


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


@pytest.mark.parametrize("name", sorted(scenarios([(Multihash.sha3_256(b""), b"")] * 5)))
def test_recorded_sequence(name: str, tmp_path: Path) -> None:
    blocks = fixture_blocks(tmp_path / "build")
    ws: Workspace = new_workspace(tmp_path / "node")
    if RECORD:
        doc = {"name": name, **scenarios(blocks)[name]}
    else:
        doc = _load(name)
        # The client messages in the file are what the description says for this dataset.
        written = scenarios(blocks)[name]
        assert [s.get("client") for s in doc["steps"]] == [
            s.get("client") for s in written["steps"]
        ]
    if doc["setup"]:
        install_fixture(ws, tmp_path / "scratch", upto=doc["setup"])

    async def main() -> None:
        async with serve_workspace(ws, HttpApiConfig(token=TOKEN)) as url:
            await _converse(url, doc, RECORD)

    asyncio.run(asyncio.wait_for(main(), 60))
    after = doc.get("after")
    if after is not None:
        head = ws.get(after["alias"]).head()
        assert head is not None and head.to_multibase() == after["head"]
    if RECORD:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        (FIXTURES / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
