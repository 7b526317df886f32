"""A seeded fault campaign: single faults in every file kind of a root and a
derivative dataset, and what `odf verify --integrity` and every read make of them.

A pristine workspace is built once (no Spark: the derivative's ExecuteTransform blocks,
slices and checkpoints are written by hand, consistent with the chain rules). Each fault
gets its own copy of it. The campaign asserts:

- ``odf verify --integrity`` detects every fault (exit 5, verification failed);
- every read (``to_arrow`` in-process; ``odf tail``/``export``/``log``/``sql`` in-process
  through `node.cli.main`, and for a few faults through the real ``odf`` executable)
  returns the pristine output or fails with a typed error (exit 3/4/5) -- never
  different records.

``scripts/bench/fault_campaign.py`` runs the same campaign at 1,000 faults.

Fault kinds: bit flip (size and mtime kept, like bit rot), truncate, append, delete, swap
(two files of the same kind in one dataset; ``refs/`` has one file, so no swap there).
Every other fault is "warm": the workspace was read before the fault, so the verified-read
stamps name the damaged files.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbs.arrow_schema import data_schema_from_arrow
from fbs.errors import OdfError
from fbs.model import (
    Checkpoint,
    DataSlice,
    ExecuteTransform,
    ExecuteTransformInput,
    OffsetInterval,
    SetDataSchema,
)
from node.api import open_workspace
from node.cli import main as odf_main
from storage.hashing import logical_hash_parquet, physical_hash_file
from storage.workspace import Workspace
from tests.node.conftest import ROOT_SCHEMA, TS, RootWriter, add_derivative, ts_ms

SEED = 20261125
#: Two rounds of the 33 (dataset, kind, fault) combinations.
N_FAULTS = 66
N_SUBPROCESS = 4
KINDS = ("blocks", "data", "checkpoints", "refs")
FAULTS = ("bitflip", "truncate", "append", "delete", "swap")
ALIASES = ("root", "deriv")
#: Exit codes of typed failures: not found, invalid, verification failed.
TYPED_EXITS = {3, 4, 5}
#: What ``odf verify --integrity`` must answer for every fault: verification failed.
DETECTED = 5


def _derived_slice(tmp: Path, start: int, rows: list[tuple[str, int]], ms: int) -> Path:
    n = len(rows)
    table = pa.table(
        {
            "offset": pa.array(range(start, start + n), pa.int64()),
            "op": pa.array([0] * n, pa.int32()),
            "system_time": pa.array([ms] * n, TS),
            "event_time": pa.array([ms - 1000 + i for i in range(n)], TS),
            "city": pa.array([r[0] for r in rows], pa.string()),
            "population": pa.array([r[1] * 2 for r in rows], pa.int64()),
        },
        schema=ROOT_SCHEMA,
    )
    path = tmp / f"deriv-{start}.parquet"
    pq.write_table(table, path)
    return path


def build_pristine(base: Path) -> Path:
    """A workspace with a root (3 slices) and a derivative (2 slices, 2 checkpoints)."""
    ws = Workspace.init(base / "project")
    slices = base / "slices"
    slices.mkdir()
    from fbs.model import DatasetKind, DatasetSnapshot

    ws.add_snapshot(DatasetSnapshot(name="root", kind=DatasetKind.Root, metadata=()))
    root = RootWriter(ws, "root", slices)
    batches = [[("a", 1), ("b", 2)], [("c", 3)], [("d", 4), ("e", 5), ("f", 6)]]
    heads = [root.append(rows) for rows in batches]
    root_state = ws.get("root").state()
    assert root_state is not None
    root_id = root_state.dataset_id
    add_derivative(ws, "deriv", ["root"], "SELECT * FROM root")
    deriv = ws.get("deriv")
    clock = root.clock_ms + 3_600_000
    head = deriv.head()
    head = deriv.commit(
        SetDataSchema(schema=data_schema_from_arrow(ROOT_SCHEMA)),
        system_time=ts_ms(clock),
        expected_head=head,
    ).new_head
    # Two steps: root blocks up to its 2nd data block, then the rest.
    steps = [
        (None, heads[1], None, 2, batches[0] + batches[1]),
        (heads[1], heads[2], 2, 5, batches[2]),
    ]
    out_start = 0
    prev_cp = None
    for n, (prev_b, new_b, prev_o, new_o, rows) in enumerate(steps):
        clock += 60_000
        data = _derived_slice(slices, out_start, rows, clock)
        physical, size = physical_hash_file(data)
        cp = slices / f"cp-{n}.bin"
        cp.write_bytes(random.Random(n).randbytes(300 + n))
        cp_hash, cp_size = physical_hash_file(cp)
        event = ExecuteTransform(
            query_inputs=(
                ExecuteTransformInput(
                    dataset_id=root_id,
                    prev_block_hash=prev_b,
                    new_block_hash=new_b,
                    prev_offset=prev_o,
                    new_offset=new_o,
                ),
            ),
            prev_checkpoint=prev_cp,
            prev_offset=None if out_start == 0 else out_start - 1,
            new_data=DataSlice(
                logical_hash=logical_hash_parquet(data),
                physical_hash=physical,
                offset_interval=OffsetInterval(start=out_start, end=out_start + len(rows) - 1),
                size=size,
            ),
            new_checkpoint=Checkpoint(physical_hash=cp_hash, size=cp_size),
        )
        head = deriv.commit(
            event,
            system_time=ts_ms(clock),
            expected_head=head,
            data_file=data,
            checkpoint_file=cp,
        ).new_head
        out_start += len(rows)
        prev_cp = cp_hash
    return base / "project"


@dataclass(frozen=True)
class Fault:
    alias: str
    kind: str
    fault: str
    target: str  # file name(s) inside the kind's directory
    other: str | None
    arg: int

    def __str__(self) -> str:
        extra = f"<->{self.other[:14]}" if self.other else ""
        return f"{self.fault} {self.alias}/{self.kind}/{self.target[:14]}{extra} ({self.arg})"


def dataset_dir(project: Path, alias: str) -> Path:
    """The directory of dataset ``alias`` in the workspace at ``project``."""
    return Workspace.open(project).get(alias).layout.root


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.is_file() and not p.name.startswith("."))


def fault_combos(project: Path) -> list[tuple[str, str, str, list[str]]]:
    """Every possible (dataset, kind, fault) with the files it can hit: a kind without
    files (the root has no checkpoints) or with one file (no swap) has fewer."""
    combos = []
    for alias in ALIASES:
        root = dataset_dir(project, alias)
        for kind in KINDS:
            files = _files(root / kind)
            for fault in FAULTS:
                if files and (fault != "swap" or len(files) >= 2):
                    combos.append((alias, kind, fault, files))
    return combos


def plan_faults(project: Path, rng: random.Random, n: int) -> list[Fault]:
    """``n`` faults cycling over (dataset, kind, fault), targets chosen at random."""
    combos = fault_combos(project)
    out = []
    for i in range(n):
        alias, kind, fault, files = combos[i % len(combos)]
        target, other = rng.sample(files, 2) if fault == "swap" else (rng.choice(files), None)
        out.append(Fault(alias, kind, fault, target, other, rng.randrange(1 << 30)))
    return out


def apply_fault(dataset_dir: Path, f: Fault) -> None:
    """Damage the file(s) ``f`` names in ``dataset_dir`` (deterministic for ``f.arg``)."""
    path = dataset_dir / f.kind / f.target
    data = path.read_bytes()
    rng = random.Random(f.arg)
    if f.fault == "bitflip":
        i = rng.randrange(len(data))
        st = path.stat()
        path.write_bytes(data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :])
        # Bit rot leaves the size and mtime as they were: only the inode's ctime moves.
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif f.fault == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))])
    elif f.fault == "append":
        path.write_bytes(data + b"x" + rng.randbytes(rng.randrange(1, 64)))
    elif f.fault == "delete":
        path.unlink()
    elif f.fault == "swap":
        assert f.other is not None
        other = dataset_dir / f.kind / f.other
        tmp = path.with_name(".swap")
        os.replace(path, tmp)
        os.replace(other, path)
        os.replace(tmp, other)
    else:  # pragma: no cover
        raise AssertionError(f.fault)


def run_cli(project: Path, *args: str) -> tuple[int, bytes]:
    """``odf ARGS`` in this process (through `node.cli.main`): exit code and stdout."""
    out = io.BytesIO()
    wrapper = io.TextIOWrapper(out, encoding="utf-8")
    with contextlib.redirect_stdout(wrapper), contextlib.redirect_stderr(io.StringIO()):
        code = odf_main(["--workspace", str(project), *args])
        wrapper.flush()
    return code, out.getvalue()


def run_exe(project: Path, *args: str) -> tuple[int, bytes]:
    """``odf ARGS`` as a real process: exit code and stdout."""
    exe = Path(sys.executable).with_name("odf")
    r = subprocess.run(
        [str(exe), "--workspace", str(project), *args], capture_output=True, timeout=120
    )
    return r.returncode, r.stdout


def read_all(project: Path, cli: Callable[..., tuple[int, bytes]]) -> dict[str, object]:
    """What every read returns: a table, bytes, or the failure (typed or not)."""
    out: dict[str, object] = {}
    for alias in ALIASES:
        try:
            out[f"api {alias}"] = open_workspace(project).dataset(alias).to_arrow()
        except OdfError as e:
            out[f"api {alias}"] = ("typed", type(e).__name__)
        except Exception as e:  # an untyped failure is a finding too
            out[f"api {alias}"] = ("UNTYPED", repr(e))
        for args in (
            ("tail", alias, "-n", "100", "--output-format", "json"),
            ("export", alias, "--output-format", "csv"),
            ("log", alias, "--output-format", "json"),
            ("sql", f'SELECT * FROM {alias} ORDER BY "offset"', "--output-format", "csv"),
        ):
            code, stdout = cli(project, *args)
            out[f"{args[0]} {alias}"] = ("exit", code) if code else stdout
    return out


#: Outcomes of one read of a damaged workspace (`judge`).
PRISTINE, TYPED, UNTYPED, WRONG = "pristine", "typed", "untyped", "wrong"


def judge(want: object, got: object) -> str:
    """A read's outcome: the pristine records, a typed failure, an untyped failure (exit
    1 or an exception outside the `OdfError` tree) or different records (a silent wrong
    read)."""
    if isinstance(got, tuple):
        if got[0] == "UNTYPED" or (got[0] == "exit" and got[1] not in TYPED_EXITS):
            return UNTYPED
        return TYPED
    if isinstance(got, pa.Table):
        assert isinstance(want, pa.Table)
        return PRISTINE if got.equals(want) else WRONG
    return PRISTINE if got == want else WRONG


def copy_with_fault(project: Path, dest: Path, fault: Fault, *, warm: bool = False) -> Path:
    """A copy of the pristine ``project`` at ``dest`` with ``fault`` applied.

    The caches are copied too (as a user's workspace would hold them), but their entries
    name the pristine paths. With ``warm`` every read runs once before the fault, so the
    verified-read stamps (in this process and in the persistent record) name the very
    files the fault then damages in place: they must not vouch for them.
    """
    shutil.copytree(project, dest, symlinks=True)
    if warm:
        read_all(dest, run_cli)
    apply_fault(dataset_dir(dest, fault.alias), fault)
    return dest


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    project = build_pristine(tmp_path_factory.mktemp("campaign"))
    reads = read_all(project, run_cli)
    for key, value in reads.items():
        assert not isinstance(value, tuple), f"{key} fails on the pristine workspace: {value}"
    code, _ = run_cli(project, "verify", "--integrity")
    assert code == 0
    return project, reads


def test_fault_campaign(pristine: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    project, expected = pristine
    rng = random.Random(SEED)
    faults = plan_faults(project, rng, N_FAULTS)
    undetected: list[str] = []
    bad_reads: list[str] = []
    typed_failures = 0
    for i, fault in enumerate(faults):
        warm = i % 2 == 1  # every other fault hits files whose stamps are remembered
        copy = copy_with_fault(project, tmp_path / f"f{i}" / "project", fault, warm=warm)
        cli = run_exe if i < N_SUBPROCESS else run_cli
        code, _ = cli(copy, "verify", "--integrity")
        if code != DETECTED:
            undetected.append(f"{fault}: verify exit {code}")
        for key, got in read_all(copy, cli).items():
            outcome = judge(expected[key], got)
            if outcome in (UNTYPED, WRONG):
                bad_reads.append(f"{fault}: {key}: {outcome} {got if outcome == UNTYPED else ''}")
            typed_failures += outcome == TYPED
        shutil.rmtree(copy.parent)
    combos = {(f.alias, f.kind, f.fault) for f in faults}
    assert combos == {c[:3] for c in fault_combos(project)}  # every one, at least once
    assert {(f.kind, f.fault) for f in faults} == {
        (k, f) for k in KINDS for f in FAULTS if (k, f) != ("refs", "swap")
    }
    assert not undetected, "\n".join(undetected)
    assert not bad_reads, "\n".join(bad_reads)
    assert typed_failures > 0
