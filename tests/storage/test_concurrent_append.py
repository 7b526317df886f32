"""Four processes append to one dataset at once: one linear chain, nothing lost."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Event
from pathlib import Path

from fbs.model import SetInfo
from storage.chain import ChainState
from storage.dataset import Dataset
from storage.layout import DatasetLayout
from storage.verify import verify_integrity
from tests.storage.test_dataset import seeded_dataset

WORKERS = 4
APPENDS_PER_WORKER = 25


def _worker(root: str, worker: int, start: Event) -> None:
    ds = Dataset(DatasetLayout(Path(root) / "ds"), state_cache=Path(root) / "cache" / "state.json")
    start.wait()
    for j in range(APPENDS_PER_WORKER):
        text = f"w{worker}-{j}"

        def build(state: ChainState | None, text: str = text) -> SetInfo:
            return SetInfo(description=text)

        ds.commit_with_retry(build, max_attempts=100_000)


def test_concurrent_appenders(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), w, start)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    blocks = list(ds.iter_blocks())  # newest first, follows prev links
    total = WORKERS * APPENDS_PER_WORKER
    assert [b.sequence_number for _, _, b in blocks] == list(range(total, -1, -1))
    texts = [b.event.description for _, _, b in blocks[:-1]]  # type: ignore[union-attr]
    assert len(texts) == len(set(texts)) == total
    assert set(texts) == {f"w{w}-{j}" for w in range(WORKERS) for j in range(APPENDS_PER_WORKER)}
    # Each worker's own appends keep their order.
    for w in range(WORKERS):
        mine = [t for t in reversed(texts) if t.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{j}" for j in range(APPENDS_PER_WORKER)]
    report = verify_integrity(ds)
    assert report.ok, report.problems
    state = Dataset(ds.layout, state_cache=tmp_path / "cache" / "state.json").state()
    assert state is not None and state.sequence_number == total
