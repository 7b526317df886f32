"""Prepare steps: gzip, zip with subPath, bomb limits, Pipe."""

from __future__ import annotations

import gzip
import sys
import zipfile
from pathlib import Path

import pytest

from fbs.model import CompressionFormat, PrepStepDecompress, PrepStepPipe
from node.ingest.errors import PrepareError, ToolMissing
from node.ingest.prepare import PrepareLimits, prepare


def test_no_steps_returns_input(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("x")
    assert prepare([], p, tmp_path / "w") == p


def test_gzip(tmp_path: Path) -> None:
    p = tmp_path / "a.csv.gz"
    p.write_bytes(gzip.compress(b"a,b\n1,2\n"))
    out = prepare([PrepStepDecompress(format=CompressionFormat.Gzip)], p, tmp_path / "w")
    assert out.read_bytes() == b"a,b\n1,2\n"
    assert out.parent == tmp_path / "w"
    assert p.exists()


def test_gzip_corrupt(tmp_path: Path) -> None:
    p = tmp_path / "a.gz"
    p.write_bytes(b"definitely not gzip")
    with pytest.raises(PrepareError, match="not a valid gzip"):
        prepare([PrepStepDecompress(format=CompressionFormat.Gzip)], p, tmp_path / "w")
    assert list((tmp_path / "w").iterdir()) == []


def _zip(tmp_path: Path, members: dict[str, bytes]) -> Path:
    p = tmp_path / "a.zip"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return p


def test_zip_sub_path_exact_and_glob(tmp_path: Path) -> None:
    p = _zip(tmp_path, {"data/x.csv": b"x", "data/y.json": b"y", "README": b"r"})
    step = PrepStepDecompress(format=CompressionFormat.Zip, sub_path="data/y.json")
    assert prepare([step], p, tmp_path / "w").read_bytes() == b"y"
    step = PrepStepDecompress(format=CompressionFormat.Zip, sub_path="*.csv")
    assert prepare([step], p, tmp_path / "w2").read_bytes() == b"x"


def test_zip_ambiguous_or_missing(tmp_path: Path) -> None:
    p = _zip(tmp_path, {"a.csv": b"1", "b.csv": b"2"})
    with pytest.raises(PrepareError, match="holds 2 files"):
        prepare([PrepStepDecompress(format=CompressionFormat.Zip)], p, tmp_path / "w")
    step = PrepStepDecompress(format=CompressionFormat.Zip, sub_path="*.csv")
    with pytest.raises(PrepareError, match="matches 2"):
        prepare([step], p, tmp_path / "w")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"nope")
    with pytest.raises(PrepareError, match="not a valid zip"):
        prepare([PrepStepDecompress(format=CompressionFormat.Zip)], bad, tmp_path / "w")


def test_bomb_limits(tmp_path: Path) -> None:
    p = _zip(tmp_path, {"big.csv": b"0" * (4 << 20)})
    tight = PrepareLimits(max_output_bytes=1 << 20)
    step = PrepStepDecompress(format=CompressionFormat.Zip)
    with pytest.raises(PrepareError, match="exceeds the limit"):
        prepare([step], p, tmp_path / "w", limits=tight)
    ratio = PrepareLimits(max_ratio=10, ratio_grace_bytes=1 << 16)
    with pytest.raises(PrepareError, match="ratio"):
        prepare([step], p, tmp_path / "w", limits=ratio)
    g = tmp_path / "big.gz"
    g.write_bytes(gzip.compress(b"0" * (4 << 20)))
    with pytest.raises(PrepareError, match="ratio"):
        prepare(
            [PrepStepDecompress(format=CompressionFormat.Gzip)], g, tmp_path / "w", limits=ratio
        )
    assert list((tmp_path / "w").iterdir()) == []


def test_pipe_and_chain(tmp_path: Path) -> None:
    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"hello\n"))
    upper = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"]
    steps = [PrepStepDecompress(format=CompressionFormat.Gzip), PrepStepPipe(command=tuple(upper))]
    assert prepare(steps, p, tmp_path / "w").read_bytes() == b"HELLO\n"


def test_pipe_failure_quotes_stderr(tmp_path: Path) -> None:
    p = tmp_path / "a"
    p.write_text("x")
    cmd = (sys.executable, "-c", "import sys; sys.stderr.write('boom happened'); sys.exit(3)")
    with pytest.raises(PrepareError, match="exited with 3: boom happened"):
        prepare([PrepStepPipe(command=cmd)], p, tmp_path / "w")
    with pytest.raises(ToolMissing, match="no-such-tool-xyz"):
        prepare([PrepStepPipe(command=("no-such-tool-xyz",))], p, tmp_path / "w")


def test_same_names_do_not_collide(tmp_path: Path) -> None:
    outs = []
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
        p = tmp_path / d / "data.csv.gz"
        p.write_bytes(gzip.compress(d.encode()))
        outs.append(prepare([PrepStepDecompress(format=CompressionFormat.Gzip)], p, tmp_path / "w"))
    assert outs[0] != outs[1]
    assert [o.read_bytes() for o in outs] == [b"x", b"y"]
