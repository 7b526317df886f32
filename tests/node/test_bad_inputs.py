"""Bad inputs through the real ``odf`` executable.

Every refusal must exit with the documented code, print exactly one line
``odf: error: ...`` on stderr (never a traceback) and leave the workspace byte-for-byte as
it was: the whole ``.odf`` tree (every path and every file's content) is hashed before and
after. Empty inputs are not errors: exit 0, "nothing to ingest", nothing committed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fbs.errors import InvalidValue, ManifestFieldError
from fbs.limits import MAX_STRING_LEN
from fbs.manifest.validate import validate_snapshot
from fbs.model import DatasetKind, DatasetSnapshot, SetInfo
from node.cli_util import EXIT_INVALID, EXIT_OK
from storage.workspace import Workspace

EXE = shutil.which("odf", path=str(Path(sys.executable).parent))

HEADER = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
"""
PUSH = """\
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Csv
      header: true
      ddlSchema:
{ddl}
    merge:
{merge}
"""
APPEND = "      kind: Append"
LEDGER = "      kind: Ledger\n      primaryKey:\n      - city"
DDL = ["event_time TIMESTAMP", "city STRING", "population BIGINT"]
STR_HEADER = "event_time,city,population\n"


def manifest(
    name: str = "pop",
    ddl: list[str] = DDL,
    merge: str = APPEND,
    extra: str = "",
) -> str:
    lines = "\n".join(f"      - {c}" for c in ddl)
    return HEADER.format(name=name) + PUSH.format(ddl=lines, merge=merge) + extra


def tree_hash(root: Path) -> str:
    """Every path under ``root`` (directories too) and every file's bytes."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        h.update(b"D" + rel.encode() + b"\0")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            h.update(b"F" + os.path.join(rel, name).encode() + b"\0")
            h.update(path.read_bytes() if not path.is_symlink() else b"L")
            h.update(b"\0")
    return h.hexdigest()


class Odf:
    """The console script in one workspace."""

    def __init__(self, root: Path) -> None:
        assert EXE is not None, "console script `odf` is not installed in the venv"
        self.root = root
        self.env = {**os.environ, "ODF_WORKSPACE": str(root)}
        self.n = 0

    def run(
        self, *argv: str, expect: int = EXIT_OK, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [str(EXE), *argv, *(["--no-progress"] if argv[0] == "ingest" else [])],
            env=self.env,
            cwd=self.root,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=120,
        )
        out = subprocess.CompletedProcess(
            r.args, r.returncode, r.stdout.decode(), r.stderr.decode(errors="replace")
        )
        assert r.returncode == expect, f"odf {' '.join(argv)} -> {r.returncode}\n{out.stderr}"
        assert "Traceback" not in out.stderr, out.stderr
        return out

    def file(self, data: str | bytes, suffix: str) -> Path:
        self.n += 1
        path = self.root / f"in{self.n}{suffix}"
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        return path

    def tree(self) -> str:
        return tree_hash(self.root / ".odf")

    def head(self, dataset: str) -> str:
        return str(Workspace.open(self.root).get(dataset).head())

    def refused(self, *argv: str, expect: int = EXIT_INVALID, stdin: bytes | None = None) -> str:
        """Run a command that must be refused; returns its one error line."""
        before = self.tree()
        r = self.run(*argv, expect=expect, stdin=stdin)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("odf: error: "), r.stderr
        assert self.tree() == before, f"odf {' '.join(argv)} changed the workspace"
        return lines[0]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A used workspace (two datasets, one with data), built once through the CLI."""
    o = Odf(tmp_path_factory.mktemp("template"))
    o.run("init")
    o.run("add", str(o.file(manifest("pop"), ".yaml")))
    o.run("add", str(o.file(manifest("ledger", merge=LEDGER), ".yaml")))
    o.run("ingest", "pop", str(o.file(STR_HEADER + "2020-01-01T00:00:00Z,A,1\n", ".csv")))
    return o.root


@pytest.fixture
def odf(template: Path, tmp_path: Path) -> Odf:
    root = tmp_path / "ws"
    shutil.copytree(template, root, symlinks=True)
    o = Odf(root)
    o.n = 100
    return o


# -- add -----------------------------------------------------------------------------------


def test_add_huge_description_is_refused_before_anything_is_stored(odf: Odf) -> None:
    big = "x" * (10 * 2**20)
    text = HEADER.format(name="big") + f"  - kind: SetInfo\n    description: {big}\n"
    line = odf.refused("add", str(odf.file(text, ".yaml")))
    assert "content.metadata[0]" in line and "exceeds the limit" in line
    odf.run("verify", "--integrity")
    assert "big" not in odf.run("list", "--output-format", "json").stdout


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (manifest("a/b/c"), "content.name"),
        (manifest("../x"), "content.name"),
        (manifest("x y"), "content.name"),
        (manifest("bad", ddl=["event_time TIMESTAMPX", "city STRING"]), "TIMESTAMPX"),
        (manifest("bad", ddl=["city STRING", "city STRING"]), "duplicate column"),
        (
            manifest("bad", extra="  - kind: SetVocab\n    eventTimeColumn: ts\n"),
            "event time column 'ts'",
        ),
        (
            manifest("bad", extra="  - kind: SetVocab\n    offsetColumn: op\n"),
            "already the",
        ),
        (manifest("bad", ddl=["offset BIGINT", "city STRING"]), "system column"),
        (
            manifest("bad", merge="      kind: Ledger\n      primaryKey:\n      - nope"),
            "'nope'",
        ),
    ],
    ids=[
        "name-two-slashes",
        "name-dotdot",
        "name-space",
        "ddl-type",
        "ddl-duplicate",
        "vocab-event-time",
        "vocab-clash",
        "system-column",
        "primary-key",
    ],
)
def test_add_refuses_invalid_manifest(odf: Odf, text: str, needle: str) -> None:
    line = odf.refused("add", str(odf.file(text, ".yaml")))
    assert needle in line, line


def test_add_account_name_is_valid(odf: Odf) -> None:
    path = str(odf.file(manifest("alice/pop"), ".yaml"))
    odf.refused("add", path)  # a '/' needs the acting account
    odf.run("add", "--account", "alice", path)
    assert "alice/pop" in odf.run("list", "--output-format", "json").stdout


def test_add_of_several_manifests_is_all_or_nothing(odf: Odf) -> None:
    good = odf.file(manifest("first"), ".yaml")
    bad = odf.file(manifest("second", ddl=["x NOPE"]), ".yaml")
    odf.refused("add", str(good), str(bad))
    odf.run("add", str(good))  # the name is still free


def test_add_unknown_input_and_taken_name_change_nothing(odf: Odf) -> None:
    deriv = """\
kind: DatasetSnapshot
version: 1
content:
  name: deriv
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: missing
    transform:
      kind: Sql
      engine: spark
      query: SELECT * FROM missing
"""
    odf.refused("add", str(odf.file(deriv, ".yaml")), expect=EXIT_INVALID)
    # A taken name is skipped with a warning, as kamu does, and nothing changes.
    taken = odf.file(manifest("pop"), ".yaml")
    before = odf.tree()
    r = odf.run("add", str(taken))
    assert "skipped pop: already exists" in r.stderr
    assert odf.tree() == before


# -- ingest: malformed input ---------------------------------------------------------------


H = STR_HEADER.encode()


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (H + b'2020-01-01T00:00:00Z,A,1\n2020-01-02T00:00:00Z,"B,2\n', "line 3"),
        (H + b'2020-01-01T00:00:00Z,A,"1', "line 2"),
        (H + b"2020-01-01T00:00:00Z,M\xfcnchen,1\n", "line 2, column 'city': byte 0xfc"),
        (H + b"2020-01-01T00:00:00Z,A,1,9\n", "line 2: expected 3 fields, found 4"),
        (H + b"2020-01-01T00:00:00Z,A\n", "line 2: expected 3 fields, found 2"),
    ],
    ids=["unterminated-mid", "unterminated-eof", "latin1", "too-many", "too-few"],
)
def test_ingest_refuses_malformed_csv(odf: Odf, data: bytes, needle: str) -> None:
    path = odf.file(data, ".csv")
    line = odf.refused("ingest", "pop", str(path))
    assert path.name in line
    assert needle in line, line


def test_unterminated_quote_in_a_text_column_is_not_one_record(tmp_path: Path) -> None:
    odf = Odf(tmp_path)
    odf.run("init")
    text = manifest("t", ddl=["a STRING", "b STRING"])
    odf.run("add", str(odf.file(text, ".yaml")))
    line = odf.refused("ingest", "t", str(odf.file('a,b\n1,"x\n2,y\n3,z\n', ".csv")))
    assert "line 2, column 'b': unterminated quoted field" in line
    # Closed quotes spanning lines are fine.
    odf.run("ingest", "t", str(odf.file('a,b\n1,"x\ny"\n2,"z"\n', ".csv")))


def test_latin1_header_and_declared_encoding(tmp_path: Path) -> None:
    odf = Odf(tmp_path)
    odf.run("init")
    text = manifest("t", ddl=["a STRING", "b STRING"]).replace(
        "      header: true\n", "      header: true\n      encoding: latin1\n"
    )
    odf.run("add", str(odf.file(text, ".yaml")))
    odf.run("ingest", "t", str(odf.file("a,b\n1,M\xfcnchen\n".encode("latin-1"), ".csv")))
    odf.run("add", str(odf.file(manifest("u", ddl=["a STRING", "b STRING"]), ".yaml")))
    line = odf.refused("ingest", "u", str(odf.file(b"a,\xfcb\n1,2\n", ".csv")))
    assert "line 1" in line and "0xfc" in line


def test_ingest_refuses_binary_garbage_on_stdin(odf: Odf) -> None:
    garbage = bytes((i * 131 + 7) % 256 for i in range(4096))
    line = odf.refused("ingest", "pop", "--stdin", stdin=garbage)
    assert "<stdin>" in line and "/tmp" not in line


def test_ingest_refuses_text_garbage_on_stdin(odf: Odf) -> None:
    line = odf.refused("ingest", "pop", "--stdin", stdin=b"this is not, a csv file\n at all")
    assert "<stdin>" in line


# -- ingest: empty input -------------------------------------------------------------------


@pytest.mark.parametrize("dataset", ["pop", "ledger"])
@pytest.mark.parametrize("kind", ["empty-file", "header-only", "empty-stdin"])
def test_empty_input_commits_nothing(odf: Odf, dataset: str, kind: str) -> None:
    head, before = odf.head(dataset), odf.tree()
    if kind == "empty-stdin":
        r = odf.run("ingest", dataset, "--stdin", stdin=b"")
    else:
        data = "" if kind == "empty-file" else STR_HEADER
        r = odf.run("ingest", dataset, str(odf.file(data, ".csv")))
    assert r.stdout.strip().splitlines() == ["Nothing to ingest: the input holds no records"]
    assert "nothing to ingest" in r.stdout.lower()
    assert odf.head(dataset) == head
    assert odf.tree() == before


# -- the same guarantees through the Python API -------------------------------------------


def test_validate_snapshot_names_the_place() -> None:
    snap = DatasetSnapshot(
        name="a",
        kind=DatasetKind.Root,
        metadata=(SetInfo(description="ok"), SetInfo(description="x" * (MAX_STRING_LEN + 1))),
    )
    with pytest.raises(ManifestFieldError) as e:
        validate_snapshot(snap)
    assert e.value.path == "content.metadata[1]"


def test_workspace_and_commit_never_store_an_unreadable_block(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path)
    ds = ws.create_dataset("a")
    before = tree_hash(ws.root)
    huge = SetInfo(description="x" * (MAX_STRING_LEN + 1))
    with pytest.raises(ManifestFieldError):
        ws.add_snapshot(DatasetSnapshot(name="b", kind=DatasetKind.Root, metadata=(huge,)))
    with pytest.raises(InvalidValue, match="would not be readable"):
        ds.commit(huge, expected_head=ds.head())
    assert tree_hash(ws.root) == before
