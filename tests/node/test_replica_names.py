"""Replicas are named as their publisher signed the name."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fbs.keys import KeyPair
from node.remote.replica_names import SUFFIX_DIGITS, replica_alias
from p2p.head_store import HeadStore
from p2p.sync import pull_dataset
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset


def test_the_publishers_name_is_used_when_free(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "w")
    did = KeyPair.generate().dataset_id
    assert replica_alias(ws, did, "com.acme.prices") == "com.acme.prices"
    assert replica_alias(ws, did, "acme/com.acme.prices") == "acme/com.acme.prices"
    assert replica_alias(ws, did, None) is None
    assert replica_alias(ws, did, "not a name") is None


def test_a_taken_name_gets_the_did_suffix_then_falls_back_to_the_did(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "w")
    ws.create_dataset("prices")
    did = KeyPair.generate().dataset_id
    suffixed = f"prices-{did.as_multibase()[-SUFFIX_DIGITS:]}"
    assert replica_alias(ws, did, "prices") == suffixed
    ws.create_dataset(suffixed)  # a squatter on the suffixed name too
    assert replica_alias(ws, did, "prices") is None


def test_an_existing_replica_keeps_its_name(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "w")
    ds = ws.create_dataset("prices")
    state = ds.state()
    assert state is not None
    assert replica_alias(ws, state.dataset_id, "prices") == "prices"


def test_a_pull_names_the_clone_from_the_signed_record(tmp_path: Path) -> None:
    from node.daemon.heads import HeadWatcher
    from p2p.memory_source import MemorySource

    wa = Workspace.init(tmp_path / "a")
    ds = make_dataset(wa, "com.acme.prices", tmp_path / "s", slices=2)
    state = ds.state()
    assert state is not None
    watcher = HeadWatcher(wa, HeadStore.for_workspace(wa.root))
    record = watcher.record_for_head(state.dataset_id, state.head)
    assert record is not None and record.name == "com.acme.prices"
    wb = Workspace.init(tmp_path / "b")
    alias = replica_alias(wb, state.dataset_id, record.name)
    result = asyncio.run(
        pull_dataset(
            wb,
            [MemorySource.of_dataset(ds)],
            dataset_id=state.dataset_id,
            alias=alias,
            head_record=record,
        )
    )
    assert result.alias == "com.acme.prices"
    assert wb.resolve("com.acme.prices").id == state.dataset_id
