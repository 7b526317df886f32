"""One error contract for the CLI (issue 13 item 6), checked on real ``odf`` processes.

Exit 1 is for bugs only; every other failure is exactly one ``odf: error: ...`` line on
stderr and a documented code (0 success, 1 internal error, 2 usage, 3 not found,
4 invalid input, 5 verification failed, 6 conflict). A damaged workspace is 5 (or 3
for an object that is simply gone) and the message points at ``odf verify``.

Measured on main: an appended-to data file made ``tail``/``export`` exit 1; a deleted
``refs/head`` made every command treat the dataset as empty and succeed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fbs.model import AddData
from node import cli
from node.cli_util import EXIT_INTERNAL, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_VERIFY_FAILED
from storage.errors import CorruptObject
from storage.workspace import Workspace
from tests.storage.test_dataset import write_checkpoint

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


def _delete_block(d: Path) -> None:
    head = (d / "refs" / "head").read_text()
    _writable(d / "blocks" / head).unlink()


def _delete_seed(d: Path) -> None:
    # the oldest block: the one no other block names as its parent is hard to find
    # without decoding, so delete by age (blocks are written in order).
    blocks = sorted((d / "blocks").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    _writable(blocks[0]).unlink()


def _append_to_data(d: Path) -> None:
    with _writable(_only(d / "data")).open("ab") as f:
        f.write(b"appended")


def _truncate_checkpoint(d: Path) -> None:
    os.truncate(_writable(_only(d / "checkpoints")), 3)


def _unreadable_data(d: Path) -> None:
    os.chmod(_only(d / "data"), 0)


def _unreadable_head(d: Path) -> None:
    os.chmod(d / "refs" / "head", 0)


DAMAGED = {EXIT_NOT_FOUND, EXIT_INVALID, EXIT_VERIFY_FAILED}
NOT_READ = {0}  # the command does not read what was damaged (log reads no data files)
COMMANDS = ("tail", "export", "log", "verify")

#: damage -> (how, expected exit codes of tail, export, log, verify)
CASES: dict[str, tuple[Callable[[Path], None], tuple[set[int], ...]]] = {
    "deleted-head": (_delete_head, (DAMAGED, DAMAGED, DAMAGED, {EXIT_VERIFY_FAILED})),
    "deleted-head-block": (_delete_block, (DAMAGED, DAMAGED, DAMAGED, {EXIT_VERIFY_FAILED})),
    "deleted-seed-block": (_delete_seed, (DAMAGED, DAMAGED, DAMAGED, {EXIT_VERIFY_FAILED})),
    "appended-data": (_append_to_data, (DAMAGED, DAMAGED, NOT_READ, {EXIT_VERIFY_FAILED})),
    "truncated-checkpoint": (
        _truncate_checkpoint,
        (NOT_READ, NOT_READ, NOT_READ, {EXIT_VERIFY_FAILED}),
    ),
    "unreadable-data": (_unreadable_data, (DAMAGED, DAMAGED, NOT_READ, {EXIT_VERIFY_FAILED})),
    "unreadable-head": (_unreadable_head, (DAMAGED, DAMAGED, DAMAGED, {EXIT_VERIFY_FAILED})),
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
            assert "odf verify" in errors[0], what


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
    monkeypatch.setattr(cli, "cmd_list", _raising(error))
    return cli.main(argv or ["list"])


def test_keyboard_interrupt_is_quiet_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main_with(monkeypatch, KeyboardInterrupt()) == 130
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (PermissionError(errno.EACCES, "Permission denied", "/x/data/f"), 4, "permission denied"),
        (OSError(errno.ENOSPC, "No space left on device", "/x/blocks"), 4, "no space left"),
        (OSError(errno.EIO, "Input/output error", "/x/refs/head"), 4, "Input/output error"),
        (FileNotFoundError(errno.ENOENT, "No such file", "/x/in.csv"), 3, "no such file"),
        (CorruptObject("object f1620ab is damaged"), 5, "odf verify"),
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
    assert cli.exit_code_for(RuntimeError("a bug")) == EXIT_INTERNAL
