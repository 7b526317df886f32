"""``odf add``: create datasets from DatasetSnapshot manifests, the way ``kamu add`` does.

- Arguments are manifest files, ``-`` (or ``--stdin``) for standard input, and with
  ``-r`` directories: every ``*.yaml`` / ``*.yml`` below one whose first lines name a
  ``DatasetSnapshot`` (or an ODF v0.39 ``Dataset`` resource) is read; other files are
  skipped, as kamu skips them.
- Every text may hold several ``---``-separated documents; every manifest form
  `fbs.manifest.snapshots` reads is accepted, an older one with a warning per rewritten
  field.
- ``--name`` renames the dataset (exactly one manifest); ``--account`` acts as an account
  (`node.add_batch`).
- The batch is added in dependency order whatever the order given; everything is read
  and validated before anything is written, so a refused batch changes nothing.
- As in kamu, a dataset that already exists is skipped with a warning (``--replace``
  deletes it and adds it again, after asking on a terminal unless ``--yes``), and of a
  name given twice only the first manifest is added. ``--visibility public`` is
  accepted (every dataset of a single-tenant workspace is public: a node serves it to
  anyone who can reach it); ``private`` is refused rather than silently ignored.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fbs.errors import InvalidName, ManifestError
from node.cli_util import EXIT_OK, add_command, open_workspace
from node.errors import UsageError

if TYPE_CHECKING:
    from fbs.did import AccountName
    from node.add_batch import BatchItem

__all__ = ["add_arguments", "cmd_add", "register"]

#: Manifest file suffixes ``-r`` reads (kamu reads ``.yaml`` only).
MANIFEST_SUFFIXES: Final = (".yaml", ".yml")
#: Significant (non-blank, non-comment) lines ``-r`` looks at to recognize a manifest.
SNIFF_LINES: Final = 4
STDIN_LABEL: Final = "STDIN"
#: kamu's ``--visibility`` values (only ``public`` can be honoured here).
VISIBILITIES: Final = ("private", "public")


def register(sub: Any) -> None:
    """Add ``add`` to the ``odf`` sub-parsers."""
    add_arguments(add_command(sub, "add", cmd_add, "add datasets from DatasetSnapshot manifests"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``odf add``."""
    p.add_argument(
        "manifest",
        nargs="*",
        help="manifest files (YAML, several documents allowed), - for stdin, directories with -r",
    )
    p.add_argument(
        "-r",
        "--recursive",
        action="store_true",
        help="read every DatasetSnapshot manifest (*.yaml, *.yml) under the directories given",
    )
    p.add_argument("--stdin", action="store_true", help="read manifests from standard input")
    p.add_argument(
        "--name", metavar="NAME", help="add the dataset under this name (one manifest only)"
    )
    p.add_argument(
        "-a",
        "--account",
        metavar="ACCOUNT",
        help="act as this account: datasets are added as ACCOUNT/name and bare transform "
        "inputs resolve in it (kamu's multi-tenant naming)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="delete and re-add datasets that already exist (otherwise they are skipped)",
    )
    p.add_argument("-y", "--yes", action="store_true", help="do not ask before --replace deletes")
    p.add_argument(
        "--visibility",
        choices=VISIBILITIES,
        default=None,
        help="kamu's dataset visibility: public is what every dataset of this "
        "single-tenant workspace is (a node serves it to anyone who can reach it); "
        "private is refused, as it cannot be enforced",
    )
    p.add_argument(
        "--engine",
        choices=["spark"],
        default=None,
        help="run every SQL transform on this engine, whatever engine the manifest names "
        "(e.g. kamu's flink/risingwave/datafusion manifests on Spark)",
    )


def cmd_add(args: argparse.Namespace) -> int:
    """Run ``odf add`` (see the module docstring)."""
    from node.usecases.add import AddOptions, add_planned, plan_add

    _visibility(getattr(args, "visibility", None))
    account = _account(args.account)
    ws = open_workspace(args)
    items = _load(_sources(args), account)
    if args.name is not None:
        items = _renamed(items, args.name, account, recursive=args.recursive)
    options = AddOptions(
        replace=getattr(args, "replace", False), engine=getattr(args, "engine", None)
    )
    plan = plan_add(ws, items, options, on_skip=_skipped)
    if plan.replaced and not args.yes and sys.stdin.isatty():
        names = ", ".join(entry.alias for entry in plan.replaced)
        answer = input(f"Replace (delete and add again) {names}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise UsageError("aborted: nothing was replaced")
    added = add_planned(ws, plan, on_deleted=lambda e: print(f"Deleted {e.alias} ({e.id})"))
    for snap, ds in zip(plan.snapshots, added, strict=True):
        print(f"Added {snap.name} ({ds.id}) head {ds.head()}")
    return EXIT_OK


# -- kamu's batch conventions: skipped names, --visibility ---------------------------------


def _visibility(value: str | None) -> None:
    """Accept kamu's ``--visibility public``; refuse ``private`` (see the README)."""
    if value == "private":
        raise UsageError(
            "--visibility private: this workspace is single-tenant and has no access "
            "control: a node serves every dataset to anyone who can reach it, so a "
            "private dataset cannot be kept private (omit the flag, or use public)"
        )


def _skipped(item: BatchItem, why: str) -> None:
    sys.stderr.write(f"odf: warning: {item.source}: skipped {item.snapshot.name}: {why}\n")


# -- arguments --------------------------------------------------------------------------


def _account(text: str | None) -> AccountName | None:
    if text is None:
        return None
    from fbs.did import AccountName

    try:
        return AccountName(text)
    except InvalidName as e:
        raise InvalidName(f"--account: {e}") from None


def _sources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(label, text)`` of every manifest text named by the arguments, in order."""
    paths: list[str] = list(args.manifest)
    if args.stdin:
        if paths:
            raise UsageError("--stdin cannot be combined with manifest arguments")
        paths = ["-"]
    if not paths:
        raise UsageError("give manifest files, - or --stdin for standard input, or -r DIR")
    if paths.count("-") > 1:
        raise UsageError("standard input (-) can be read only once")
    texts: list[tuple[str, str]] = []
    for arg in paths:
        if arg == "-":
            texts.append((STDIN_LABEL, sys.stdin.read()))
        elif Path(arg).is_dir():
            if not args.recursive:
                raise UsageError(f"{arg}: is a directory (use -r to add the manifests under it)")
            texts.extend(_directory(Path(arg)))
        else:
            texts.append((arg, _read(Path(arg))))
    return texts


def _read(path: Path) -> str:
    from fbs.manifest.limits import MAX_MANIFEST_BYTES

    with path.open("rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: manifest larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text: {e}") from None


def _directory(root: Path) -> Iterator[tuple[str, str]]:
    files = sorted(p for p in root.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    found = False
    for path in files:
        text = _read(path)
        if _looks_like_snapshot(text):
            found = True
            yield str(path), text
    if not found:
        raise ManifestError(f"{root}: no DatasetSnapshot manifest under this directory")


def _looks_like_snapshot(text: str) -> bool:
    """kamu's test: a DatasetSnapshot named in the first significant lines (or a resource)."""
    lines = (s.strip() for s in text.splitlines())
    significant = [s for s in lines if s and not s.startswith("#")][:SNIFF_LINES]
    for line in significant:
        if "DatasetSnapshot" in line:
            return True
        if line.startswith("$schema") and line.rstrip("'\"").endswith(("Dataset", "Dataset.json")):
            return True
    return False


# -- the batch --------------------------------------------------------------------------


def _load(sources: list[tuple[str, str]], account: AccountName | None) -> list[BatchItem]:
    from fbs.manifest.snapshots import load_snapshot_documents
    from node.add_batch import BatchItem, apply_account

    items: list[BatchItem] = []
    for label, text in sources:
        try:
            loaded = load_snapshot_documents(text)
        except ManifestError as e:
            raise ManifestError(f"{label}: {e}") from None
        for doc in loaded:
            source = label if len(loaded) == 1 else f"{label} document {doc.document + 1}"
            for note in doc.deprecations:
                sys.stderr.write(f"odf: warning: {source}: {note}\n")
            try:
                snapshot = apply_account(doc.snapshot, account)
            except ManifestError as e:
                raise ManifestError(f"{source}: {e}") from None
            items.append(BatchItem(source, snapshot))
    return items


def _renamed(
    items: list[BatchItem], name: str, account: AccountName | None, *, recursive: bool
) -> list[BatchItem]:
    from dataclasses import replace

    from node.add_batch import apply_account

    if recursive:
        raise UsageError("--name cannot be combined with -r (it names one dataset)")
    if len(items) != 1:
        raise UsageError(f"--name needs exactly one manifest, got {len(items)}")
    (item,) = items
    try:
        snapshot = apply_account(item.snapshot.replace(name=name), account)
    except ManifestError as e:
        raise ManifestError(f"--name: {e}") from None
    return [replace(item, snapshot=snapshot)]
