"""``odf add`` like kamu's: -r, multi-document streams, any order, cycles, --name,
--account (account/name references), old manifest forms, canonical references.

Refused batches must leave the workspace byte-for-byte unchanged (hashed tree).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fbs.codec import block_hash, encode_block
from fbs.did import DatasetId
from fbs.model import SetTransform
from fbs.multiformats import Multihash, encode_multibase
from fbs.timestamp import Timestamp
from node.cli import main
from node.cli_util import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from storage.workspace import Workspace


def run(ws: Path, *argv: str) -> int:
    return main(["--workspace", str(ws), *argv])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    assert run(root, "init") == EXIT_OK
    return root


def tree_hash(ws: Path) -> str:
    """Hash of every path and file content under the workspace."""
    h = hashlib.sha256()
    for path in sorted((ws / ".odf").rglob("*")):
        h.update(str(path.relative_to(ws)).encode() + b"\0")
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def root_doc(name: str) -> str:
    return textwrap.dedent(
        f"""\
        kind: DatasetSnapshot
        version: 1
        content:
          name: {name}
          kind: Root
          metadata:
            - kind: AddPushSource
              sourceName: default
              read:
                kind: NdJson
                ddlSchema: ["t TIMESTAMP", "v BIGINT"]
              merge:
                kind: Append
            - kind: SetVocab
              eventTimeColumn: t
        """
    )


def derived_doc(name: str, *refs: str, table: str | None = None) -> str:
    inputs = "".join(f"\n        - datasetRef: {r}" for r in refs)
    source = table or refs[0]
    return textwrap.dedent(
        f"""\
        kind: DatasetSnapshot
        version: 1
        content:
          name: {name}
          kind: Derivative
          metadata:
            - kind: SetTransform
              inputs:{{inputs}}
              transform:
                kind: Sql
                engine: spark
                query: SELECT t, v FROM {source}
            - kind: SetVocab
              eventTimeColumn: t
        """
    ).replace("{inputs}", inputs)


def aliases(ws: Path) -> list[str]:
    return [e.alias for e in Workspace.open(ws).list()]


def transform_of(ws: Path, alias: str) -> SetTransform:
    state = Workspace.open(ws).get(alias).state()
    assert state is not None and state.transform is not None
    return state.transform


def event_hashes(ws: Path, alias: str) -> list[Multihash]:
    """Hashes of the dataset's non-Seed blocks with a fixed header (time, previous)."""
    ds = Workspace.open(ws).get(alias)
    fixed = Multihash.sha3_256(b"prev")
    out = []
    for _, _, block in sorted(ds.iter_blocks(), key=lambda x: x[2].sequence_number):
        if block.sequence_number == 0:
            continue
        same = block.replace(system_time=Timestamp(0), prev_block_hash=fixed)
        out.append(block_hash(encode_block(same)))
    return out


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- -r, multi-document, order ----------------------------------------------------------


def test_recursive_multi_document_any_order(ws: Path, tmp_path: Path) -> None:
    d = tmp_path / "manifests"
    # c needs b needs a; given as c, b (one file, two documents), then a.
    write(d / "a-derived" / "cb.yaml", derived_doc("c", "b") + "---\n" + derived_doc("b", "a"))
    write(d / "z" / "a.yml", "# the root\n\n" + root_doc("a"))
    write(d / "compose.yaml", "services:\n  web: {}\n")  # not a manifest: skipped
    write(d / "notes.txt", root_doc("never"))  # not *.yaml
    assert run(ws, "add", "-r", str(d)) == EXIT_OK
    assert aliases(ws) == ["a", "b", "c"]
    b_id = Workspace.open(ws).resolve("b").id
    assert transform_of(ws, "c").inputs[0].dataset_ref == b_id.to_did_odf()


def test_stdin_multi_document(
    ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(derived_doc("y", "x") + "---\n" + root_doc("x")))
    assert run(ws, "add", "--stdin") == EXIT_OK
    monkeypatch.setattr("sys.stdin", io.StringIO(root_doc("z")))
    assert run(ws, "add", "-") == EXIT_OK
    assert aliases(ws) == ["x", "y", "z"]
    capsys.readouterr()
    assert run(ws, "add", "--stdin", "other.yaml") == EXIT_USAGE
    assert "--stdin" in capsys.readouterr().err


def test_directory_needs_r_and_a_manifest(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    assert run(ws, "add", str(d)) == EXIT_USAGE
    assert "-r" in capsys.readouterr().err
    write(d / "x.yaml", "a: 1\n")
    assert run(ws, "add", "-r", str(d)) == EXIT_INVALID
    assert "no DatasetSnapshot manifest" in capsys.readouterr().err


def test_cycle_is_refused_and_named(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ws, "add", str(write(tmp_path / "r.yaml", root_doc("r")))) == EXIT_OK
    before = tree_hash(ws)
    text = derived_doc("p", "q") + "---\n" + derived_doc("q", "p", "r") + "---\n"
    text += derived_doc("s", "r")
    capsys.readouterr()
    assert run(ws, "add", str(write(tmp_path / "cycle.yaml", text))) == EXIT_INVALID
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cycle: p -> q -> p" in err
    assert tree_hash(ws) == before


def test_self_reference_imposes_no_order(ws: Path, tmp_path: Path) -> None:
    # kamu ignores a self-reference when ordering; the input then fails to resolve.
    before = tree_hash(ws)
    path = write(tmp_path / "self.yaml", derived_doc("me", "me"))
    assert run(ws, "add", str(path)) == EXIT_INVALID
    assert tree_hash(ws) == before


def test_refused_batch_changes_nothing(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ws, "add", str(write(tmp_path / "r.yaml", root_doc("r")))) == EXIT_OK
    before = tree_hash(ws)
    good = write(tmp_path / "good.yaml", root_doc("g") + "---\n" + derived_doc("h", "g"))
    for bad in (
        derived_doc("u", "unknown"),
        root_doc("bad").replace("v BIGINT", "v NOTATYPE"),
        "kind: DatasetSnapshot\nversion: 1\ncontent: {name: x}\n",
    ):
        path = write(tmp_path / "bad.yaml", bad)
        assert run(ws, "add", str(good), str(path)) != EXIT_OK
        assert capsys.readouterr().err.count("\n") == 1
        assert tree_hash(ws) == before
    assert aliases(ws) == ["r"]


# -- --name -----------------------------------------------------------------------------


def test_name_renames_one_manifest(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "a.yaml", root_doc("a"))
    assert run(ws, "add", str(path), "--name", "renamed") == EXIT_OK
    assert aliases(ws) == ["renamed"]
    before = tree_hash(ws)
    two = write(tmp_path / "two.yaml", root_doc("x") + "---\n" + root_doc("y"))
    assert run(ws, "add", str(two), "--name", "n") == EXIT_USAGE
    assert run(ws, "add", "-r", str(tmp_path), "--name", "n") == EXIT_USAGE
    assert run(ws, "add", str(path), "--name", "bad name") == EXIT_INVALID
    assert run(ws, "add", str(path), "--name", "acc/n") == EXIT_INVALID
    assert "--name" in capsys.readouterr().err
    assert tree_hash(ws) == before


# -- accounts ---------------------------------------------------------------------------


def test_slash_in_a_plain_name_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_hash(ws)
    capsys.readouterr()
    assert run(ws, "add", str(write(tmp_path / "a.yaml", root_doc("alice/a")))) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "may not contain '/'" in err and "--account alice" in err
    path = write(tmp_path / "b.yaml", root_doc("bob/b"))
    assert run(ws, "add", "--account", "alice", str(path)) == EXIT_INVALID
    assert "not to the acting account alice" in capsys.readouterr().err
    assert run(ws, "add", "--account", "not/valid", str(path)) == EXIT_INVALID
    assert tree_hash(ws) == before


def test_account_names_resolve_like_kamu_multi_tenant(ws: Path, tmp_path: Path) -> None:
    # alice's root, a derivative of it by account/name (quoted table, as kamu's example),
    # and bob's derivative of alice's one; given in reverse order across two accounts.
    write(tmp_path / "alice" / "2pub.yaml", derived_doc("2pub", "alice/1pub", table='"alice/1pub"'))
    write(tmp_path / "alice" / "1pub.yaml", root_doc("1pub"))
    write(tmp_path / "alice" / "3pub.yaml", derived_doc("alice/3pub", "1pub"))
    assert run(ws, "add", "-a", "alice", "-r", str(tmp_path / "alice")) == EXIT_OK
    bob = write(
        tmp_path / "bob" / "6pub.yaml",
        derived_doc("6pub", "alice/2pub", "1pub", table="`alice/2pub`"),  # a quoted table name
    )
    assert run(ws, "add", "--account", "bob", str(bob)) == EXIT_INVALID  # bob/1pub: none
    write(tmp_path / "bob" / "1pub.yaml", root_doc("1pub"))
    assert run(ws, "add", "--account", "bob", "-r", str(tmp_path / "bob")) == EXIT_OK
    assert aliases(ws) == ["alice/1pub", "alice/2pub", "alice/3pub", "bob/1pub", "bob/6pub"]
    w = Workspace.open(ws)
    ids = {a: w.resolve(a).id.to_did_odf() for a in aliases(ws)}
    # The alias (the SQL table name) is the reference as written.
    assert [(i.dataset_ref, i.alias) for i in transform_of(ws, "alice/2pub").inputs] == [
        (ids["alice/1pub"], "alice/1pub")
    ]
    assert [(i.dataset_ref, i.alias) for i in transform_of(ws, "alice/3pub").inputs] == [
        (ids["alice/1pub"], "1pub")
    ]
    assert [(i.dataset_ref, i.alias) for i in transform_of(ws, "bob/6pub").inputs] == [
        (ids["alice/2pub"], "alice/2pub"),
        (ids["bob/1pub"], "1pub"),
    ]


def test_account_reference_without_acting_account(ws: Path, tmp_path: Path) -> None:
    assert run(ws, "add", "-a", "alice", str(write(tmp_path / "a.yaml", root_doc("a")))) == 0
    plain = write(tmp_path / "d.yaml", derived_doc("d", "alice/a", table='"alice/a"'))
    assert run(ws, "add", str(plain)) == EXIT_OK
    assert aliases(ws) == ["alice/a", "d"]
    # A bare name resolves only in its own (here: no) account.
    assert run(ws, "add", str(write(tmp_path / "e.yaml", derived_doc("e", "a")))) == EXIT_INVALID


# -- old forms and canonical references -------------------------------------------------


def test_old_form_writes_the_blocks_of_the_current_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spaces = {}
    forms = {
        "current": root_doc("a"),
        "pre-0.38": root_doc("a")
        .replace("ddlSchema:", "schema:")
        .replace("kind: NdJson", "kind: jsonLines"),
        "resource": textwrap.dedent(
            """\
            $schema: https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset
            headers: {name: a}
            spec:
              kind: Root
              metadata:
                - kind: AddPushSource
                  sourceName: default
                  read: {kind: NdJson, ddlSchema: ["t TIMESTAMP", "v BIGINT"]}
                  merge: {kind: Append}
                - {kind: SetVocab, eventTimeColumn: t}
            """
        ),
    }
    for form, text in forms.items():
        ws = tmp_path / form
        ws.mkdir()
        assert run(ws, "init") == EXIT_OK
        capsys.readouterr()
        assert run(ws, "add", str(write(tmp_path / f"{form}.yaml", text))) == EXIT_OK
        err = capsys.readouterr().err
        spaces[form] = event_hashes(ws, "a")
        if form == "current":
            assert err == ""
        else:
            assert err.startswith("odf: warning: ")
    assert err.count("\n") == 1 and "$schema" in err
    assert spaces["pre-0.38"] == spaces["current"] == spaces["resource"]


def test_did_reference_in_any_multibase_writes_kamus_block(ws: Path, tmp_path: Path) -> None:
    assert run(ws, "add", str(write(tmp_path / "a.yaml", root_doc("a")))) == EXIT_OK
    did = Workspace.open(ws).resolve("a").id
    hex_ref = did.to_did_odf()
    b58_ref = "did:odf:" + encode_multibase(did.to_bytes(), "base58btc")
    table = f'"{hex_ref}"'
    for name, ref in (("hex", hex_ref), ("b58", b58_ref)):
        path = write(tmp_path / f"{name}.yaml", derived_doc(name, ref, table=table))
        assert run(ws, "add", str(path)) == EXIT_OK
    (item,) = transform_of(ws, "b58").inputs
    assert (item.dataset_ref, item.alias) == (hex_ref, hex_ref)
    assert event_hashes(ws, "b58") == event_hashes(ws, "hex")
    assert isinstance(DatasetId.from_did(b58_ref), DatasetId)


def test_real_process_reads_a_multi_document_stdin_in_any_order(ws: Path) -> None:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    old = root_doc("a").replace("ddlSchema:", "schema:")  # pre-v0.38 form
    text = derived_doc("b", "a") + "---\n" + old
    r = subprocess.run(
        [exe, "--workspace", str(ws), "add", "-"],
        input=text.encode(),
        capture_output=True,
        check=False,
    )
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stdout.decode().splitlines()[0].startswith("Added a ")
    assert r.stderr.decode().splitlines() == [
        "odf: warning: STDIN document 2: content.metadata[0].read.schema: "
        "a DDL list is now ddlSchema (ODF v0.38)"
    ]
    assert aliases(ws) == ["a", "b"]


def test_recursive_reads_dataset_resources_and_skips_other_resources(
    ws: Path, tmp_path: Path
) -> None:
    d = tmp_path / "resources"
    write(
        d / "secrets.yaml",
        "# $schema: https://opendatafabric.org/schemas/config/v1alpha1/SecretSet\n"
        "$schema: https://opendatafabric.org/schemas/config/v1alpha1/SecretSet\n"
        "headers: {name: s}\nspec: {secrets: {a: b}}\n",
    )
    write(
        d / "dataset.yaml",
        "# $schema: https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset.json\n"
        "$schema: https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset.json\n"
        "headers:\n  name: bobs-dataset\n  account: bob\nspec:\n  kind: Root\n  metadata: []\n",
    )
    assert run(ws, "add", "-r", str(d)) == EXIT_INVALID  # bob/...: needs --account bob
    assert run(ws, "add", "-r", str(d), "--account", "bob") == EXIT_OK
    assert aliases(ws) == ["bob/bobs-dataset"]
