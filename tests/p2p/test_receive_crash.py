"""Crash at every file operation of a receive: a pull, a staged install, an HTTP push.

Everything that arrives from outside is written by storage through the `FsOps` seam
(`p2p.receive`: `ObjectStore.adopt`, `Dataset.append_blocks_bytes`,
`storage.staging.install_staged`), so `CrashAt` reaches every step. For each crash
point (and again after a modelled power loss) the receiving workspace is reopened with
real file operations and must hold the dataset as before or fully at the new head,
with `verify_integrity` clean; the same receive run again then completes.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fbs.multiformats import Multihash
from p2p.head_record import sign_head
from p2p.head_store import HeadStore
from p2p.http.server import PushBody, TransferConfig, TransferServer, apply_push
from p2p.receive import ObjectJob, ObjectKind, accept_object, object_jobs, object_store
from p2p.sync import pull_dataset
from storage.dataset import Dataset
from storage.errors import DatasetNotFound
from storage.faults import CrashAt, FsOps, SimulatedCrash, plan_crashes
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

ALIAS = "prices"


class DatasetSource:
    """An `ObjectSource` over a local dataset (no sockets): the bytes a peer would send."""

    name = "local-dataset"
    parallel_objects = 1  # one object at a time: the same crash point each run

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds

    async def get_head(self) -> Multihash | None:
        return self.ds.head()

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        out: list[bytes] = []
        h: Multihash | None = head
        while h is not None and h != stop_at:
            raw, block = self.ds.get_block(h)
            out.append(raw)
            h = block.prev_block_hash
        return out

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        # Written outside the seam, as a transport does; the receive path hashes it.
        with open(dest_path, "xb") as f:
            f.write(object_store(self.ds.layout, kind).get(h))
        return None


def _pull(ws_root: Path, source: Dataset, ops: FsOps) -> None:
    ws = Workspace(ws_root, ops=ops)
    asyncio.run(pull_dataset(ws, DatasetSource(source), alias=ALIAS, objects_per_source=1))


def _head_or_none(ws: Workspace) -> Multihash | None:
    try:
        ds = ws.get(ALIAS, require_head=False)
    except DatasetNotFound:
        return None
    report = verify_integrity(ds, require_head=True)
    assert report.ok, report
    return ds.head()


def _crash_everywhere(
    tmp_path: Path,
    fresh: Callable[[Path], Path],
    operation: Callable[[Path, FsOps], None],
    power_loss: bool,
) -> tuple[int, dict[Multihash | None, int]]:
    """Crash ``operation`` at every point on a ``fresh`` workspace; heads seen afterwards."""
    probe = fresh(tmp_path / "probe")
    plan = plan_crashes(lambda ops: operation(probe, ops))
    seen: dict[Multihash | None, int] = {}
    for n in plan.points():
        root = fresh(tmp_path / f"crash-{n}")
        crash = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            operation(root, crash)
        if power_loss:
            crash.power_loss()
        head = _head_or_none(Workspace(root))
        seen[head] = seen.get(head, 0) + 1
        operation(root, FsOps())  # recovery: the same receive completes
        assert _head_or_none(Workspace(root)) is not None
    # A receive that returned is durable: a power loss right after it undoes nothing
    # the new head needs.
    root = fresh(tmp_path / "complete")
    done = CrashAt(None)
    operation(root, done)
    head = _head_or_none(Workspace(root))
    done.power_loss()
    assert _head_or_none(Workspace(root)) == head is not None
    return plan.count, seen


@pytest.fixture
def source(tmp_path: Path) -> Workspace:
    ws = new_workspace(tmp_path / "source")
    make_dataset(ws, ALIAS, tmp_path / "files", 2, checkpoints=True)
    return ws


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_pull_of_new_blocks_crashes_to_old_or_new_head(
    tmp_path: Path, source: Workspace, power_loss: bool
) -> None:
    src = source.get(ALIAS)
    template = new_workspace(tmp_path / "template")
    _pull(template.root, src, FsOps())
    old = template.get(ALIAS).head()
    add_slices(src, tmp_path / "more", 1, checkpoints=True)
    new = src.head()

    def fresh(path: Path) -> Path:
        shutil.copytree(template.root.parent, path)
        return path / template.root.name

    count, seen = _crash_everywhere(
        tmp_path / "runs", fresh, lambda root, ops: _pull(root, src, ops), power_loss
    )
    assert set(seen) <= {old, new}
    # The head moves at the last operation's durability: a power loss before it undoes it.
    assert seen.get(old, 0) > 0 and (power_loss or seen.get(new, 0) > 0)
    assert count >= 8 + 5  # two objects adopted (4 each), then the block and the ref


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_clone_is_installed_whole_or_not_at_all(
    tmp_path: Path, source: Workspace, power_loss: bool
) -> None:
    src = source.get(ALIAS)

    def fresh(path: Path) -> Path:
        return new_workspace(path).root

    count, seen = _crash_everywhere(
        tmp_path / "runs", fresh, lambda root, ops: _pull(root, src, ops), power_loss
    )
    assert set(seen) <= {None, src.head()}
    assert seen.get(None, 0) > 0
    plan = plan_crashes(lambda ops: _pull(fresh(tmp_path / "trace"), src, ops))
    renames = [p for k, p in plan.trace if k == "replace" and "/datasets/" in p]
    assert len(renames) == 1  # the install is one rename of the whole staged dataset
    assert count == plan.count


def _push(ws_root: Path, owner: Workspace, ops: FsOps) -> None:
    """Receive what `push_dataset` sends to this node: uploads, then the push."""
    ws = Workspace(ws_root, ops=ops)
    ds = ws.get(ALIAS)
    src = owner.get(ALIAS)
    new = []
    for h, raw, b in src.iter_blocks():
        if h == ds.head():
            break  # `push_dataset` sends only what the node lacks
        new.append((h, raw, b))
    if not new:
        return
    new.reverse()
    for job in object_jobs(b for _h, _raw, b in new):
        _upload(ds, src, job)
    last_h, _raw, last = new[-1]
    key = owner.keys.load(owner.resolve(ALIAS).id)
    record = sign_head(key, last_h, last.sequence_number, last.system_time)
    server = TransferServer(
        workspace=ws,
        head_store=HeadStore.for_workspace(ws.root, ops=ops),
        signer=lambda _did: None,
        config=TransferConfig(),
        push_lock=asyncio.Lock(),
    )
    apply_push(server, ds, PushBody(record, [raw for _h, raw, _b in new]), "")


def _upload(ds: Dataset, src: Dataset, job: ObjectJob) -> None:
    """What `put_object` does with an upload: quarantine, then the receive path."""
    store = object_store(ds.layout, job.kind)
    if store.has(job.hash):
        return  # `push_dataset` skips objects the node has
    quarantine = store.quarantine_path()
    data = object_store(src.layout, job.kind).get(job.hash)
    quarantine.write_bytes(data)
    accept_object(store, job, quarantine, Multihash.sha3_256(data).digest)


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_http_push_receive_crashes_to_old_or_new_head(
    tmp_path: Path, source: Workspace, power_loss: bool
) -> None:
    src = source.get(ALIAS)
    template = new_workspace(tmp_path / "template")
    _pull(template.root, src, FsOps())
    old = template.get(ALIAS).head()
    add_slices(src, tmp_path / "more", 2, checkpoints=True)

    def fresh(path: Path) -> Path:
        shutil.copytree(template.root.parent, path)
        return path / template.root.name

    count, seen = _crash_everywhere(
        tmp_path / "runs",
        fresh,
        lambda root, ops: _push(root, source, ops),
        power_loss,
    )
    assert set(seen) <= {old, src.head()}
    assert seen.get(old, 0) > 0 and (power_loss or seen.get(src.head(), 0) > 0)
    assert count >= 16  # four objects adopted (4 each), the head record, blocks, ref
