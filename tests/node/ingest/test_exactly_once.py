"""Exactly-once ingest: an ingest killed at any point and re-run neither loses nor duplicates.

Two kinds of death: `storage.faults.CrashAt` at every mutating file operation of a pull
(with and without simulated power loss), and real SIGKILLs of a child process before and
after each commit and after the slice was written.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fbs.model import (
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    FetchStepFilesGlob,
    MergeStrategyAppend,
    ReadStepCsv,
    SetPollingSource,
)
from node.ingest.pipeline import ingest, pull, read_changelog
from storage.dataset import Dataset
from storage.faults import CrashAt, SimulatedCrash
from storage.verify import verify_integrity
from storage.workspace import Workspace

DDL = ("event_time TIMESTAMP", "id BIGINT")
FILES = 3
ROWS_PER_FILE = 2
EXPECTED = list(range(FILES * ROWS_PER_FILE))
PROJECT = Path(__file__).resolve().parents[3]


def make_base(tmp_path: Path) -> Path:
    """A workspace with a FilesGlob polling dataset and its inbox; returns the project dir."""
    root = tmp_path / "base"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    for f in range(FILES):
        lines = ["event_time,id"]
        for r in range(ROWS_PER_FILE):
            lines.append(f"2020-01-0{f + 1}T00:00:00Z,{f * ROWS_PER_FILE + r}")
        (inbox / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
    ws = Workspace.init(root)
    src = SetPollingSource(
        fetch=FetchStepFilesGlob(path=str(inbox / "*.csv")),
        read=ReadStepCsv(header=True, ddl_schema=DDL),
        merge=MergeStrategyAppend(),
    )
    ws.add_snapshot(DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(src,)))
    return root


def copy_of(base: Path, dest: Path) -> Path:
    # The source glob names the original inbox: read-only input shared by all copies.
    shutil.copytree(base, dest)
    return dest


def ids(ds: Dataset) -> list[int]:
    t = read_changelog(ds)
    return [] if t is None else sorted(t.column("id").to_pylist())


def pull_until_up_to_date(ds: Dataset) -> None:
    for _ in range(5):
        if pull(ds).up_to_date:
            return
    raise AssertionError("pull never reported up to date")


def count_ops(base: Path, tmp_path: Path) -> int:
    probe = CrashAt(None)
    ws = Workspace.open(copy_of(base, tmp_path / "probe"), ops=probe)
    res = pull(ws.get("pop"))
    assert res.num_records == len(EXPECTED)
    return probe.count


@pytest.mark.parametrize("power_loss", [False, True])
def test_crash_at_every_file_operation_then_rerun(tmp_path: Path, power_loss: bool) -> None:
    base = make_base(tmp_path)
    total = count_ops(base, tmp_path)
    assert total > 4  # schema commit + data commit, each several durable steps
    for n in range(1, total + 1):
        here = copy_of(base, tmp_path / f"crash-{n}")
        crash = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            pull(Workspace.open(here, ops=crash).get("pop"))
        if power_loss:
            crash.power_loss()
        ds = Workspace.open(here).get("pop")
        assert ids(ds) in ([], EXPECTED), f"partial data after crash at op {n}"
        pull_until_up_to_date(ds)
        assert ids(ds) == EXPECTED, f"crash at op {n}"
        assert verify_integrity(ds).ok


def test_push_ingest_is_all_or_nothing(tmp_path: Path) -> None:
    root = tmp_path / "push"
    ws = Workspace.init(root)
    src = AddPushSource(
        source_name="default",
        read=ReadStepCsv(header=True, ddl_schema=DDL),
        merge=MergeStrategyAppend(),
    )
    ws.add_snapshot(DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(src,)))
    data = tmp_path / "in.csv"
    data.write_text("event_time,id\n2020-01-01T00:00:00Z,0\n2020-01-01T00:00:00Z,1\n")
    probe = CrashAt(None)
    ingest(Workspace.open(copy_of(root, tmp_path / "probe"), ops=probe).get("pop"), [data])
    for n in range(1, probe.count + 1):
        here = copy_of(root, tmp_path / f"c{n}")
        crash = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            ingest(Workspace.open(here, ops=crash).get("pop"), [data])
        crash.power_loss()
        ds = Workspace.open(here).get("pop")
        assert ids(ds) in ([], [0, 1]), f"partial ingest visible after crash at op {n}"
        # The caller cannot know whether the commit landed: it simply re-runs.
        result = ingest(ds, [data])
        assert ids(ds) == [0, 1], f"crash at op {n}"
        assert result.duplicate_input == (not result.committed)
        assert verify_integrity(ds).ok


def test_push_rerun_of_same_input_is_a_no_op_unless_allowed(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    src = AddPushSource(
        source_name="default",
        read=ReadStepCsv(header=True, ddl_schema=DDL),
        merge=MergeStrategyAppend(),
    )
    ds = ws.add_snapshot(DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(src,)))
    a = tmp_path / "a.csv"
    a.write_text("event_time,id\n2020-01-01T00:00:00Z,0\n")
    b = tmp_path / "b.csv"
    b.write_text("event_time,id\n2020-01-01T00:00:00Z,1\n")
    assert ingest(ds, [a]).committed
    again = ingest(ds, [a])
    assert again.duplicate_input and not again.committed
    assert ids(ds) == [0]
    assert ingest(ds, [b]).committed
    # Not the last input any more: a deliberate re-send of `a` is ingested.
    assert ingest(ds, [a]).committed
    assert ingest(ds, [a], allow_duplicate=True).committed
    assert ids(ds) == [0, 0, 0, 1]


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from storage.dataset import Dataset
    from storage.refs import DiskRefStore
    from node.ingest import writer
    point = sys.argv[2]
    calls = {"commit": 0}
    original_commit = Dataset.commit_events
    original_close = writer.SliceWriter.close
    original_move = DiskRefStore.set_if_equals

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def commit(self, events, **kw):
        calls["commit"] += 1
        if point == f"before-commit-{calls['commit']}":
            die()
        result = original_commit(self, events, **kw)
        if point == f"after-commit-{calls['commit']}":
            die()
        return result

    def move(self, name, old, new):
        # Blocks and objects are stored; the head has not moved yet.
        if point == "before-head-move":
            die()
        return original_move(self, name, old, new)

    def close(self):
        result = original_close(self)
        if point == "after-slice":
            die()
        return result

    Dataset.commit_events = commit
    DiskRefStore.set_if_equals = move
    writer.SliceWriter.close = close
    from storage.workspace import Workspace
    from node.ingest.pipeline import pull
    pull(Workspace.open(Path(sys.argv[1])).get("pop"))
    """
)


@pytest.mark.parametrize(
    "point",
    # The schema and the first AddData are one commit (one head move).
    ["after-slice", "before-commit-1", "before-head-move", "after-commit-1"],
)
def test_sigkill_then_rerun(tmp_path: Path, point: str) -> None:
    here = make_base(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, str(here), point],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    ds = Workspace.open(here).get("pop")
    assert ids(ds) in ([], EXPECTED)
    pull_until_up_to_date(ds)
    assert ids(ds) == EXPECTED
    assert verify_integrity(ds).ok


def test_a_key_recorded_by_the_older_algorithm_is_still_recognised(tmp_path: Path) -> None:
    """Push input keys are SHA-256; a blake2b key of an older release still marks a duplicate."""
    from fbs.model import SourceState
    from node.ingest.commit import commit_plan
    from node.ingest.compute import Plan
    from node.ingest.input_keys import PUSH_INPUT_STATE_KIND, push_input_key

    ws = Workspace.init(tmp_path / "ws")
    src = AddPushSource(
        source_name="default",
        read=ReadStepCsv(header=True, ddl_schema=DDL),
        merge=MergeStrategyAppend(),
    )
    ds = ws.add_snapshot(DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(src,)))
    a = tmp_path / "a.csv"
    a.write_text("event_time,id\n2020-01-01T00:00:00Z,0\n")
    assert ingest(ds, [a]).committed
    state = ds.state()
    assert state is not None and state.last_source_state is not None
    assert state.last_source_state.value.startswith("sha256:")
    legacy = SourceState(
        source_name="default",
        kind=PUSH_INPUT_STATE_KIND,
        value=push_input_key("default", [a], None, algorithm="blake2b-256"),
    )
    assert legacy.value.startswith("blake2b-256:")
    plan = Plan(None, None)
    head = ds.head()
    commit_plan(ds, head, state, plan, legacy, None, state.system_time)
    again = ingest(ds, [a])
    assert again.duplicate_input and not again.committed
    assert ids(ds) == [0]
