"""One error contract for the CLI, checked on real ``odf`` processes.

Exit 1 is for bugs only; every other failure is exactly one ``odf: error: ...`` line on
stderr and a documented code (0 success, 1 internal error, 2 usage, 3 not found,
4 invalid input, 5 verification failed, 6 conflict, 7 unavailable). A damaged workspace
(an object that differs from its metadata or is gone, a lost head) is 5 and the message
points at ``odf verify``.

The cases that are easy to get wrong: an appended-to data file (5, not 1); a deleted
``refs/head`` (5: the dataset is not empty); a deleted block (5 with the hint, not 3);
an engine that cannot be reached (7, not 1).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from engine.errors import EngineTimeout, EngineUnavailable
from fbs.model import AddData, ExecuteTransform, MetadataBlock, SetDataSchema, SetTransform
from fbs.multiformats import Multihash
from node import cli, error_contract
from node.cli_util import (
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    EXIT_VERIFY_FAILED,
)
from node.errors import EngineManagerError, EngineSettingsError
from storage import catalog, verified
from storage.dataset import Dataset
from storage.errors import CorruptObject, DamagedObject
from storage.verify import SOUND_SLICES_DIR
from storage.workspace import Workspace
from tests.node.test_fault_campaign import build_pristine
from tests.storage.test_dataset import write_checkpoint

if TYPE_CHECKING:
    from engine.client import EngineClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "node" / "examples" / "city-populations.yaml"
ALIAS = "demo.a"


def odf_exe() -> str:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None, "the odf console script is not installed next to the interpreter"
    return exe


def _odf(ws: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    return subprocess.run(
        [odf_exe(), *argv], env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with one root dataset: Seed .. one ingested slice, then a checkpoint."""
    root = tmp_path_factory.mktemp("contract")
    ws = root / "ws"
    ws.mkdir()
    assert _odf(ws, "init").returncode == 0
    manifest = root / "a.yaml"
    manifest.write_text(
        EXAMPLE.read_text(encoding="utf-8").replace("demo.city-populations", ALIAS),
        encoding="utf-8",
    )
    assert _odf(ws, "add", str(manifest)).returncode == 0
    csv = root / "s.csv"
    csv.write_text(
        "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-01T00:00:00Z,B,2\n",
        encoding="utf-8",
    )
    r = _odf(ws, "ingest", ALIAS, str(csv))
    assert r.returncode == 0, r.stderr
    ds = Workspace.open(ws).get(ALIAS)
    cp = write_checkpoint(root / "cp", b"engine state " * 10)
    state = ds.state()
    assert state is not None
    ds.commit(
        AddData(
            prev_offset=state.last_offset,
            new_checkpoint=cp,
            new_watermark=state.last_watermark,
        ),
        expected_head=ds.head(),
        checkpoint_file=root / "cp",
    )
    r = _odf(ws, "verify", "--integrity")
    assert r.returncode == 0, r.stdout + r.stderr
    return ws


def _only(store_dir: Path) -> Path:
    files = [p for p in store_dir.iterdir() if not p.name.startswith(".")]
    assert len(files) == 1, files
    return files[0]


def _dataset_dir(ws: Path) -> Path:
    (d,) = (ws / ".odf" / "datasets").iterdir()
    return d


def _writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def _delete_head(d: Path) -> None:
    (d / "refs" / "head").unlink()


def _foreign_hash_head(d: Path) -> None:
    # One flipped bit turns the sha3-256 code (0x16) into sha2-256 (0x12): still a valid
    # multihash, but it names no block.
    head = _writable(d / "refs" / "head")
    text = head.read_text()
    assert text.startswith("f1620")
    head.write_text("f1220" + text[5:])


def _delete_block(d: Path) -> None:
    head = (d / "refs" / "head").read_text()
    _writable(d / "blocks" / head).unlink()


def _delete_seed(d: Path) -> None:
    # the oldest block: the one no other block names as its parent is hard to find
    # without decoding, so delete by age (blocks are written in order).
    blocks = sorted((d / "blocks").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    _writable(blocks[0]).unlink()


def _delete_data(d: Path) -> None:
    _writable(_only(d / "data")).unlink()


def _delete_checkpoint(d: Path) -> None:
    _writable(_only(d / "checkpoints")).unlink()


def _append_to_data(d: Path) -> None:
    with _writable(_only(d / "data")).open("ab") as f:
        f.write(b"appended")


def _truncate_checkpoint(d: Path) -> None:
    os.truncate(_writable(_only(d / "checkpoints")), 3)


def _unreadable_data(d: Path) -> None:
    os.chmod(_only(d / "data"), 0)


def _unreadable_head(d: Path) -> None:
    os.chmod(d / "refs" / "head", 0)


#: A damaged workspace: exit 5, the one error line pointing at ``odf verify``.
DAMAGE = {EXIT_VERIFY_FAILED}
#: Permission denied: an OS error (4), or verify's report of it (5). Not as root.
OS_ERROR = {EXIT_INVALID, EXIT_VERIFY_FAILED}
NOT_READ = {0}  # the command does not read what was damaged (log reads no data files)
COMMANDS = ("tail", "export", "log", "verify")

#: damage -> (how, expected exit codes of tail, export, log, verify)
CASES: dict[str, tuple[Callable[[Path], None], tuple[set[int], ...]]] = {
    "deleted-head": (_delete_head, (DAMAGE, DAMAGE, DAMAGE, DAMAGE)),
    "foreign-hash-head": (_foreign_hash_head, (DAMAGE, DAMAGE, DAMAGE, DAMAGE)),
    "deleted-head-block": (_delete_block, (DAMAGE, DAMAGE, DAMAGE, DAMAGE)),
    "deleted-seed-block": (_delete_seed, (DAMAGE, DAMAGE, DAMAGE, DAMAGE)),
    "deleted-data": (_delete_data, (DAMAGE, DAMAGE, NOT_READ, DAMAGE)),
    "deleted-checkpoint": (_delete_checkpoint, (NOT_READ, NOT_READ, NOT_READ, DAMAGE)),
    "appended-data": (_append_to_data, (DAMAGE, DAMAGE, NOT_READ, DAMAGE)),
    "truncated-checkpoint": (_truncate_checkpoint, (NOT_READ, NOT_READ, NOT_READ, DAMAGE)),
    "unreadable-data": (_unreadable_data, (OS_ERROR, OS_ERROR, NOT_READ, OS_ERROR)),
    "unreadable-head": (_unreadable_head, (OS_ERROR, OS_ERROR, OS_ERROR, OS_ERROR)),
}
NEEDS_NON_ROOT = {"unreadable-data", "unreadable-head"}


def _argv(command: str, ws: Path) -> list[str]:
    if command == "export":
        return ["export", ALIAS, "--output-format", "csv", "--output-path", str(ws / "out.csv")]
    if command == "verify":
        return ["verify", "--integrity", ALIAS]
    return [command, ALIAS]


@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_workspace_fails_typed(case: str, base: Path, tmp_path: Path) -> None:
    if case in NEEDS_NON_ROOT and os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    damage, expected = CASES[case]
    ws = tmp_path / "ws"
    shutil.copytree(base, ws, symlinks=True)
    damage(_dataset_dir(ws))
    for command, codes in zip(COMMANDS, expected, strict=True):
        r = _odf(ws, *_argv(command, ws))
        what = f"{case}: odf {command} -> {r.returncode}\n{r.stderr}"
        assert r.returncode != EXIT_INTERNAL, what
        assert r.returncode in codes, what
        assert "Traceback" not in r.stderr, what
        errors = [line for line in r.stderr.splitlines() if line.startswith("odf: error:")]
        assert len(errors) == (0 if r.returncode == 0 else 1), what
        if r.returncode == EXIT_VERIFY_FAILED and command != "verify":
            assert "odf verify --integrity" in errors[0], what


def test_verify_reports_a_lost_head(base: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(base, ws, symlinks=True)
    _delete_head(_dataset_dir(ws))
    r = _odf(ws, "verify", "--integrity")
    assert r.returncode == EXIT_VERIFY_FAILED
    assert f"{ALIAS}: FAILED" in r.stdout and "head-missing" in r.stdout
    assert "OK" not in r.stdout


def test_temp_files_are_warned_about_and_collected(base: Path, tmp_path: Path) -> None:
    """kill -9 during ingest leaves .pending-* files in blocks/ and data/."""
    ws = tmp_path / "ws"
    shutil.copytree(base, ws, symlinks=True)
    d = _dataset_dir(ws)
    old = 0.0  # the epoch: certainly stale
    leftovers = []
    for sub in ("blocks", "data"):
        p = d / sub / ".pending-0123456789abcdef"
        p.write_bytes(b"half written")
        os.utime(p, (old, old))
        leftovers.append(p)
    young = d / "data" / ".pending-fedcba9876543210"
    young.write_bytes(b"in progress")
    r = _odf(ws, "verify", "--integrity")
    assert r.returncode == 0, r.stderr  # warnings, not failures
    assert r.stderr.count("stale temporary file") == 2, r.stderr
    assert r.stderr.count("odf: warning:") == 3, r.stderr
    assert "odf: error" not in r.stderr
    r = _odf(ws, "gc")
    assert r.returncode == 0, r.stderr
    assert "Removed 2 stale temporary file(s)" in r.stdout
    assert "kept 1 temporary file(s)" in r.stderr
    assert not any(p.exists() for p in leftovers) and young.exists()
    r = _odf(ws, "verify", "--integrity")
    assert r.returncode == 0 and "stale temporary file" not in r.stderr


# -- the mapping itself (in-process) -----------------------------------------------------------


def _raising(error: BaseException) -> Callable[..., int]:
    def command(_args: object) -> int:
        raise error

    return command


def _main_with(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, argv: list[str] | None = None
) -> int:
    import node.commands.list

    monkeypatch.setattr(node.commands.list, "cmd_list", _raising(error))
    return cli.main(argv or ["list"])


def test_keyboard_interrupt_is_one_line_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main_with(monkeypatch, KeyboardInterrupt()) == 130
    assert capsys.readouterr().err == "odf: interrupted\n"


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (PermissionError(errno.EACCES, "Permission denied", "/x/data/f"), 4, "permission denied"),
        (OSError(errno.ENOSPC, "No space left on device", "/x/blocks"), 4, "no space left"),
        (OSError(errno.EIO, "Input/output error", "/x/refs/head"), 4, "Input/output error"),
        (FileNotFoundError(errno.ENOENT, "No such file", "/x/in.csv"), 3, "no such file"),
        (CorruptObject("object f1620ab is damaged"), 5, "odf verify"),
        (EngineUnavailable("engine at 127.0.0.1:1 unavailable"), 7, "unavailable"),
        (EngineTimeout("engine call timed out"), 7, "timed out"),
        (EngineManagerError("the engine did not start within 60 s"), 7, "did not start"),
        (EngineSettingsError("invalid engine address 'x'"), 2, "invalid engine address"),
    ],
)
def test_typed_one_line_errors(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: BaseException,
    code: int,
    text: str,
) -> None:
    assert _main_with(monkeypatch, error) == code
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("odf: error:") and text in lines[0], lines


def test_user_files_are_invalid_input_not_damage(tmp_path: Path) -> None:
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_bytes(b"not parquet")
    r = subprocess.run(
        [odf_exe(), "hash", "logical", str(not_parquet)], capture_output=True, text=True
    )
    assert r.returncode == EXIT_INVALID, r.stderr
    assert r.stderr.count("odf: error:") == 1 and "Traceback" not in r.stderr


def test_bugs_still_exit_1() -> None:
    assert error_contract.exit_code_for(RuntimeError("a bug")) == EXIT_INTERNAL


# -- exit codes of real processes: engine, add, replay, delete ---------------------------------


def _one_error(r: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in r.stderr.splitlines() if line.startswith("odf: error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_an_engine_that_cannot_be_reached_is_unavailable_7(base: Path) -> None:
    """Nobody listens on port 1: the engine is unavailable (7), not a bug (1)."""
    env = {**os.environ, "ODF_WORKSPACE": str(base), "ODF_ENGINE_ADDRESS": "127.0.0.1:1"}
    argv = [odf_exe(), "sql", "--engine", "spark", "SELECT 1"]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == EXIT_UNAVAILABLE, r.stderr
    assert "unavailable" in _one_error(r)
    # A malformed address is a settings (usage) error instead: retrying cannot help.
    env["ODF_ENGINE_ADDRESS"] = "not-an-address"
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "invalid engine address" in _one_error(r)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_an_unknown_transform_input_at_add_is_invalid_input_4(base: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(base, ws, symlinks=True)
    manifest = tmp_path / "d.yaml"
    manifest.write_text(
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: demo.d\n  kind: Derivative\n"
        "  metadata:\n  - kind: SetTransform\n    inputs:\n    - datasetRef: demo.nope\n"
        "    transform:\n      kind: Sql\n      engine: spark\n"
        "      query: SELECT * FROM `demo.nope`\n",
        encoding="utf-8",
    )
    before = _tree(ws)
    r = _odf(ws, "add", str(manifest))
    assert r.returncode == EXIT_INVALID, r.stderr
    line = _one_error(r)
    assert "unknown transform input" in line and "demo.nope" in line and str(manifest) in line
    assert _tree(ws) == before  # refused before anything was stored


@pytest.fixture(scope="module")
def derivative(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fault campaign's pristine workspace: ``deriv`` has 2 ExecuteTransform blocks,
    the second one resuming from the first one's checkpoint (built without Spark)."""
    return build_pristine(tmp_path_factory.mktemp("replay"))


def _damage_checkpoint(project: Path, h: object) -> Path:
    (path,) = (Workspace.open(project).get("deriv").layout.checkpoints.root).glob(f"{h}")
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only the hash can tell
    path.write_bytes(bytes(data))
    return path


@dataclass(frozen=True)
class _Resumed:
    """The derivative's second ExecuteTransform block and the chain context it runs in."""

    ds: Dataset
    h: Multihash
    block: MetadataBlock
    event: ExecuteTransform
    set_transform: SetTransform
    schema: SetDataSchema


def _second_transform(project: Path) -> _Resumed:
    ds = Workspace.open(project).get("deriv")
    chain = [(h, b) for h, _raw, b in ds.iter_blocks()][::-1]
    (st,) = [b.event for _h, b in chain if isinstance(b.event, SetTransform)]
    (schema,) = [b.event for _h, b in chain if isinstance(b.event, SetDataSchema)]
    transforms = [(h, b) for h, b in chain if isinstance(b.event, ExecuteTransform)]
    h, block = transforms[1]
    event = block.event
    assert isinstance(event, ExecuteTransform) and event.prev_checkpoint is not None
    assert isinstance(st, SetTransform) and isinstance(schema, SetDataSchema)
    return _Resumed(ds, h, block, event, st, schema)


class _NoEngine:
    """An engine that must not be reached: the damage is found before any request."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the engine was used ({name}) with a damaged checkpoint")


def test_replay_reads_the_previous_checkpoint_verified(derivative: Path, tmp_path: Path) -> None:
    """Damage after the integrity pass (or between blocks) still never reaches the engine."""
    from node.validation.replay import replay_transform_block

    project = tmp_path / "project"
    shutil.copytree(derivative, project, symlinks=True)
    r = _second_transform(project)
    _damage_checkpoint(project, r.event.prev_checkpoint)
    with pytest.raises(DamagedObject) as caught:
        replay_transform_block(
            Workspace.open(project),
            r.ds,
            "deriv",
            r.h,
            r.block,
            set_transform=r.set_transform,
            vocab=None,
            schema=r.schema,
            engine=cast("EngineClient", _NoEngine()),
        )
    assert caught.value.kind == "checkpoint"
    assert error_contract.exit_code_for(caught.value) == EXIT_VERIFY_FAILED


def test_full_verify_with_a_damaged_checkpoint_exits_5(derivative: Path, tmp_path: Path) -> None:
    """``odf verify deriv`` (replay) as a process: typed 5 before any engine is needed."""
    project = tmp_path / "project"
    shutil.copytree(derivative, project, symlinks=True)
    _damage_checkpoint(project, _second_transform(project).event.prev_checkpoint)
    env = {**os.environ, "ODF_WORKSPACE": str(project), "ODF_ENGINE_ADDRESS": "127.0.0.1:1"}
    r = subprocess.run(
        [odf_exe(), "verify", "deriv"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == EXIT_VERIFY_FAILED, r.stdout + r.stderr
    assert "verification failed: deriv" in _one_error(r)
    assert "deriv: FAILED" in r.stdout


def test_delete_drops_the_dataset_caches(derivative: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(derivative, project, symlinks=True)
    for alias in ("root", "deriv"):  # reads remember every slice (process and record)
        assert cli.main(["--workspace", str(project), "tail", alias]) == 0
    ws = Workspace.open(project)
    deriv_dir = ws.get("deriv").layout.root
    records = project / ".odf" / "cache" / verified.RECORD_DIR
    deriv_record = records / f"{deriv_dir.name}.json"
    root_record = records / f"{ws.get('root').layout.root.name}.json"
    assert deriv_record.is_file() and root_record.is_file()

    def stamps_under(d: Path) -> list[str]:
        return [k for k in verified._SEEN if k.startswith(f"{d}{os.sep}")]

    assert stamps_under(deriv_dir)
    verify = ["verify", "--integrity", "--logical-hashes"]  # records the slices found sound
    assert cli.main(["--workspace", str(project), *verify]) == 0
    sound = project / ".odf" / "cache" / SOUND_SLICES_DIR / f"{deriv_dir.name}.json"
    assert sound.is_file()
    # the read caches of `odf sql` (slice list) and `odf log` (block rows)
    assert cli.main(["--workspace", str(project), "log", "deriv"]) == 0
    assert cli.main(["--workspace", str(project), "sql", "SELECT count(*) FROM deriv"]) == 0
    read_caches = [
        catalog.slices_cache_path(ws.root, ws.resolve("deriv").id),
        catalog.block_rows_cache_path(ws.root, ws.resolve("deriv").id),
    ]
    assert [p.is_file() for p in read_caches] == [True, True]
    assert cli.main(["--workspace", str(project), "delete", "--yes", "deriv"]) == 0
    assert not deriv_record.exists() and not stamps_under(deriv_dir) and not sound.exists()
    assert not any(p.exists() for p in read_caches)
    assert root_record.is_file()  # the other dataset's stamps stay
    assert cli.main(["--workspace", str(project), "verify", "--integrity"]) == 0


def test_an_up_to_date_pull_does_not_start_an_engine(derivative: Path, tmp_path: Path) -> None:
    """A derivative with no new input is up to date without the engine: `odf pull` (a cron
    job's `--all`) neither starts a shared engine nor needs one that works. No engine is
    configured and Java cannot start, so reaching for one would exit 7."""
    project = tmp_path / "project"
    shutil.copytree(derivative, project, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k != "ODF_ENGINE_ADDRESS"}
    user_run = tmp_path / "engine-run"  # the user's shared engine would be recorded there
    env |= {
        "ODF_WORKSPACE": str(project),
        "JAVA_HOME": str(tmp_path / "no-java"),
        "ODF_ENGINE_RUN_DIR": str(user_run),
    }
    for argv in (["pull", "deriv"], ["pull", "--all"]):
        r = subprocess.run([odf_exe(), *argv], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "deriv: up-to-date" in r.stdout
    assert "(no polling source)" in r.stdout  # --all passes the push-only root by
    run_dir = project / ".odf" / "run"
    assert not (run_dir / "engine.json").exists()
    assert not (user_run / "engine.json").exists()
