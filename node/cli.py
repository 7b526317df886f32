"""The ``odf`` command line.

Every command maps typed errors to exit codes (see `node.errors`) and prints a one-line
message on stderr; heavy modules (pyarrow, the codec) are imported inside commands so
that ``odf --help`` and simple commands start fast.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fbs.errors import MalformedBlock, ManifestError, OdfError
from node.cli_util import (
    EXIT_OK,
    EXIT_USAGE,
    WORKSPACE_ENV,
    open_workspace,
    workspace_dir,
    workspace_root,
)
from node.error_contract import report_error
from node.errors import UsageError, VerificationFailed
from node.render.output import OUTPUT_FORMATS, render

if TYPE_CHECKING:
    from fbs.multiformats import Multihash
    from storage.catalog import DatasetEntry, DatasetSummary


def cmd_init(args: argparse.Namespace) -> int:
    from storage.workspace import Workspace

    root = workspace_dir(args) or Path.cwd()
    ws = Workspace.init(root, exist_ok=args.exist_ok)
    print(f"Initialized an empty workspace in {ws.root}")
    return EXIT_OK


def cmd_add(args: argparse.Namespace) -> int:
    from node.commands.add import cmd_add as run_add

    return run_add(args)


def cmd_list(args: argparse.Namespace) -> int:
    from storage.catalog import cached_summary, entries

    root = workspace_root(args)
    rows = []
    for entry in entries(root):
        # The chain-state cache at the head answers without decoding a block; a dataset
        # whose cache is behind is summarized from its chain (and its cache refreshed).
        summary = cached_summary(root, entry) or _chain_summary(root, entry)
        rows.append(
            {
                "alias": entry.alias,
                "id": str(entry.id),
                "kind": summary.kind if summary else "",
                "head": str(summary.head) if summary else "",
                "blocks": summary.blocks if summary else 0,
                "records": summary.records if summary else 0,
                "size": summary.size if summary else 0,
            }
        )
    if args.output_format == "table":
        render(rows, "table", columns=["alias", "kind", "blocks", "records", "size", "head"])
    else:
        render(rows, args.output_format)
    return EXIT_OK


def _chain_summary(root: Path, entry: DatasetEntry) -> DatasetSummary | None:
    """`cmd_list`'s row of a dataset whose chain-state cache is not at its head."""
    from storage.catalog import DatasetSummary, open_dataset

    ds = open_dataset(root, entry)
    state = ds.state()
    if state is None:
        return None
    ds.flush_state_cache()  # the next `odf list` reads the cache alone
    return DatasetSummary(
        state.kind.name, state.head, state.num_blocks, state.num_records, state.data_size
    )


def cmd_log(args: argparse.Namespace) -> int:
    from storage.catalog import open_dataset, resolve

    if args.limit is not None and args.limit < 0:
        raise UsageError("-n must be >= 0")
    root = workspace_root(args)
    entry = resolve(root, args.dataset)
    if args.output_format == "table":
        rows = _cached_log_rows(root, entry, args.limit)
        if rows is None:
            rows = _decoded_log_rows(root, entry, args.limit)
        table = [
            {
                "seq": seq,
                "system_time": when,
                "event": event,
                "summary": summary,
                "hash": str(h) if args.full_hashes else h.short(),
            }
            for h, (seq, when, event, summary, _prev) in rows
        ]
        render(table, "table", columns=["seq", "system_time", "event", "summary", "hash"])
        return EXIT_OK
    from fbs.manifest import to_plain

    ds = open_dataset(root, entry)
    # iter_blocks reads (and decodes) lazily: islice stops it after the N newest blocks,
    # before the block N+1 is read (`odf log -n N` costs N blocks, not the history).
    walk = itertools.islice(ds.iter_blocks(), args.limit)
    data = [{"blockHash": str(h), "block": to_plain(b)} for h, _raw, b in walk]
    render(data, args.output_format)
    return EXIT_OK


#: What `odf log` shows of a block, and its predecessor: sequence number, system time,
#: event name, event summary, previous block hash (multibase, or None for the Seed).
LogRow = tuple[int, str, str, str, "str | None"]


def _log_row(row: object) -> LogRow | None:
    """``row`` (from the block-rows cache) as a `LogRow`, if it has that shape."""
    if not isinstance(row, list) or len(row) != 5:
        return None
    seq, when, event, summary, prev = row
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return None
    if not all(isinstance(v, str) for v in (when, event, summary)):
        return None
    if not (prev is None or isinstance(prev, str)) or (prev is None) != (seq == 0):
        return None
    return (seq, when, event, summary, prev)


def _cached_log_rows(
    root: Path, entry: DatasetEntry, limit: int | None
) -> list[tuple[Multihash, LogRow]] | None:
    """`odf log`'s rows from the block-rows cache (`storage.catalog.cached_block_rows`),
    walking from the head, each block read and hash-checked but not decoded; None when
    a block has no row, is missing or damaged, or rows do not chain (the caller decodes).
    """
    from fbs.errors import FbsError
    from fbs.multiformats import Multihash
    from storage.catalog import cached_block_rows
    from storage.errors import StorageError
    from storage.layout import DatasetLayout
    from storage.refs import HEAD

    cache = cached_block_rows(root, entry)
    if not cache:
        return None
    layout = DatasetLayout(entry.path)
    h = layout.refs.get_or_none(HEAD)
    out: list[tuple[Multihash, LogRow]] = []
    expected: int | None = None
    while h is not None and (limit is None or len(out) < limit):
        row = _log_row(cache.get(h.to_multibase()))
        if row is None or (expected is not None and row[0] != expected):
            return None
        try:
            layout.blocks.check(h)  # the block is there and hashes to its name
            prev = None if row[4] is None else Multihash.from_multibase(row[4])
        except (StorageError, OSError, FbsError):
            return None
        out.append((h, row))
        h, expected = prev, row[0] - 1
    return out if out or limit == 0 else None


def _decoded_log_rows(
    root: Path, entry: DatasetEntry, limit: int | None
) -> list[tuple[Multihash, LogRow]]:
    """`odf log`'s rows from the decoded chain; they are kept for the next log."""
    from node.render.events import event_summary
    from storage.catalog import cached_block_rows, open_dataset, write_block_rows

    ds = open_dataset(root, entry)
    # iter_blocks reads (and decodes) lazily: islice stops it after the N newest blocks,
    # before the block N+1 is read (`odf log -n N` costs N blocks, not the history).
    out: list[tuple[Multihash, LogRow]] = []
    for h, _raw, b in itertools.islice(ds.iter_blocks(), limit):
        prev = None if b.prev_block_hash is None else b.prev_block_hash.to_multibase()
        when = b.system_time.to_datetime().strftime("%Y-%m-%d %H:%M:%S")
        out.append(
            (h, (b.sequence_number, when, type(b.event).__name__, event_summary(b.event), prev))
        )
    if out:
        cache = cached_block_rows(root, entry)
        cache.update({h.to_multibase(): list(row) for h, row in out})
        write_block_rows(root, entry, cache)
    return out


def cmd_delete(args: argparse.Namespace) -> int:
    """Delete datasets; ``-r`` also deletes every dataset that reads them."""
    from node.dependents import uses_from_outside, with_downstream
    from node.errors import DatasetInUse

    ws = open_workspace(args)
    named = [ws.resolve(ref) for ref in args.dataset]
    ids = [entry.id for entry in named]
    if args.recursive:
        doomed = with_downstream(ws, ids)
    else:
        uses = uses_from_outside(ws, ids)
        if uses:
            use = uses[0]
            used = next(e.alias for e in named if e.id == use.used)
            raise DatasetInUse(
                f"cannot delete {used}: {use.consumer.alias} takes it as an input "
                "(delete both, or use -r to delete every dataset that reads it)"
            )
        doomed = list(dict.fromkeys(named))
    if not args.yes and sys.stdin.isatty():
        names = ", ".join(f"{e.alias} ({e.id})" for e in doomed)
        answer = input(f"Delete {names}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborted")
            return EXIT_USAGE
    for entry in doomed:  # readers first: no moment holds a transform without its input
        ws.delete(entry.id)
        print(f"Deleted {entry.alias}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    if args.trust is not None:
        return _verify_trust(args)
    if not args.integrity:
        if args.logical_hashes:
            raise UsageError("--logical-hashes applies to --integrity (a full verify always does)")
        # Full verification: integrity, then replay of every transform on the engine.
        from node.commands.transform import cmd_verify_replay

        return cmd_verify_replay(args)
    if args.recursive:
        raise UsageError("-r applies to full (replay) verification, not --integrity")
    from storage.verify import verify_datasets

    ws = open_workspace(args)
    entries = [ws.resolve(r) for r in args.dataset] if args.dataset else ws.list()
    results: list[dict[str, Any]] = []
    # One pool checks the objects of every dataset (many small datasets use every core).
    # A registered dataset always has a head: a missing one is reported, not skipped.
    datasets = [ws.get(entry.id, require_head=False) for entry in entries]
    # As kamu's integrity check: sizes and physical hashes prove the bytes are the ones the
    # chain names (every disk fault); recomputing logical hashes checks the publisher's
    # claim about those bytes, which a full verify and `odf validate` do: it costs a
    # decode and ~3x the bytes hashed, so here only when asked (`--logical-hashes`).
    reports = verify_datasets(datasets, require_head=True, check_logical_hashes=args.logical_hashes)
    for entry, report in zip(entries, reports, strict=True):
        results.append(
            {
                "dataset": entry.alias,
                "id": str(entry.id),
                "ok": report.ok,
                "head": str(report.head) if report.head else None,
                "blocks": report.blocks_checked,
                "objects": report.objects_checked,
                "problems": [
                    {
                        "kind": str(p.kind),
                        "message": p.message,
                        "block": str(p.block_hash) if p.block_hash else None,
                        "sequenceNumber": p.sequence_number,
                        "object": str(p.object_hash) if p.object_hash else None,
                        "rule": p.rule,
                    }
                    for p in report.problems
                ],
                "warnings": [
                    {"kind": w.kind, "message": w.message, "path": w.path} for w in report.warnings
                ],
            }
        )
    from storage.verify import temp_file_warning

    # Temp files are warnings (never referenced, invisible to readers): see storage.verify.
    for r in results:
        for w in r["warnings"]:
            sys.stderr.write(f"odf: warning: {r['dataset']}: {w['message']}\n")
    if not args.dataset:
        for t in ws.temp_files():
            sys.stderr.write(
                f"odf: warning: {temp_file_warning(t.path, t.age_s, t.stale).message}\n"
            )
    if args.output_format == "table":
        for r in results:
            status = "OK" if r["ok"] else "FAILED"
            print(f"{r['dataset']}: {status} ({r['blocks']} blocks, {r['objects']} objects)")
            for problem in r["problems"]:
                where = (
                    f" (block #{problem['sequenceNumber']})"
                    if problem["sequenceNumber"] is not None
                    else ""
                )
                print(f"  - {problem['kind']}{where}: {problem['message']}")
    else:
        render(results, args.output_format)
    failed = [r for r in results if not r["ok"]]
    if failed:
        names = ", ".join(r["dataset"] for r in failed)
        raise VerificationFailed(f"verification failed: {names}", failed)
    return EXIT_OK


def _verify_trust(args: argparse.Namespace) -> int:
    """Accept heads on validators' attestations instead of replaying locally."""
    from fbs.did import DatasetId
    from node.validation.trust import verify_with_trust

    if args.integrity:
        raise UsageError("--trust and --integrity exclude each other")
    trusted = {DatasetId.from_did(v) for v in args.validator} if args.validator else None
    ws = open_workspace(args)
    entries = [ws.resolve(r) for r in args.dataset] if args.dataset else ws.list()
    rows: list[dict[str, Any]] = []
    for entry in entries:
        report = verify_with_trust(ws, entry.id, args.trust, trusted=trusted)
        rows.append(
            {
                "dataset": entry.alias,
                "id": str(entry.id),
                "head": str(report.head) if report.head else None,
                "ok": report.ok,
                "disputed": report.disputed,
                "required": report.required,
                "validators": [v.to_did_key() for v in report.validators],
                "failures": list(report.failures),
                "notes": list(report.notes),
            }
        )
    if args.output_format == "table":
        for r in rows:
            status = "OK" if r["ok"] else ("DISPUTED" if r["disputed"] else "NOT VERIFIED")
            print(
                f"{r['dataset']}: {status} ({len(r['validators'])} validator(s), "
                f"{r['required']} required)"
            )
            for f in r["failures"]:
                print(f"  - {f}")
            for n in r["notes"]:
                sys.stderr.write(f"odf: note: {r['dataset']}: {n}\n")
    else:
        render(rows, args.output_format)
    failed = [r for r in rows if not r["ok"]]
    if failed:
        names = ", ".join(r["dataset"] for r in failed)
        raise VerificationFailed(f"not verified by {args.trust} validator(s): {names}", failed)
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    ws = open_workspace(args)
    report = ws.gc(dry_run=args.dry_run)
    verb = "Would delete" if args.dry_run else "Deleted"
    count = sum(
        len(r.deleted) for d in (report.blocks, report.data, report.checkpoints) for r in d.values()
    )
    print(f"{verb} {count} unreferenced object(s), {report.bytes_freed} bytes")
    verb = "Would remove" if args.dry_run else "Removed"
    print(f"{verb} {len(report.temp_removed)} stale temporary file(s)")
    if report.temp_kept:
        sys.stderr.write(
            f"odf: note: kept {len(report.temp_kept)} temporary file(s) younger than an hour "
            "(a writer may still own them; they are removed once stale)\n"
        )
    for alias, reason in report.skipped.items():
        sys.stderr.write(f"odf: warning: skipped {alias}: {reason}\n")
    return EXIT_OK


def cmd_block_encode(args: argparse.Namespace) -> int:
    from fbs.codec import block_hash, encode_block
    from fbs.manifest import load_block_yaml

    text = _read_input(args.manifest)
    loaded = load_block_yaml(text)
    version = args.block_version or loaded.version or 2
    block = loaded.block
    data = encode_block(block, version=version)
    h = block_hash(data)
    if args.output == "-":
        # Binary on stdout for pipes; the hash goes to stderr so the pipe stays clean.
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        sys.stderr.write(f"{h}\n")
        return EXIT_OK
    if args.output:
        from storage.fsutil import write_file_durably

        write_file_durably(Path(args.output), data)
    print(h)
    return EXIT_OK


def cmd_block_decode(args: argparse.Namespace) -> int:
    from fbs.codec import block_hash, decode_block_versioned
    from fbs.manifest import dump_block_yaml, dumps_json

    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        block, version = decode_block_versioned(data)
    except MalformedBlock as e:
        raise type(e)(f"{args.file}: not a valid ODF block: {e}") from None
    if args.output_format == "json":
        sys.stdout.write(dumps_json(block, version=version, indent=2) + "\n")
    else:
        sys.stdout.write(dump_block_yaml(block, version=version))
    sys.stderr.write(f"# hash: {block_hash(data)}\n")
    return EXIT_OK


def cmd_hash_logical(args: argparse.Namespace) -> int:
    from storage.hashing import logical_hash_parquet

    print(logical_hash_parquet(Path(args.file)))
    return EXIT_OK


def cmd_hash_physical(args: argparse.Namespace) -> int:
    from storage.hashing import physical_hash_file

    h, _size = physical_hash_file(Path(args.file))
    print(h)
    return EXIT_OK


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text: {e}") from None


# -- parser -----------------------------------------------------------------------------


def _add_format(p: argparse.ArgumentParser, choices: Sequence[str], default: str) -> None:
    p.add_argument(
        "--output-format",
        choices=list(choices),
        default=default,
        help=f"output format (default: {default})",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argparse tree of the ``odf`` command.

    ``command``: a top-level command name (see `command_word`); only the parsers of the
    module that registers it are built (`node.commands.COMMAND_OWNERS`). Parsing that
    command's arguments gives the same result as with the whole tree, without importing
    every command module and building ~35 parsers at each start (~25 ms). ``None`` or an
    unknown name: the whole tree (top-level help, "invalid choice" listing every command).
    """
    import importlib

    from node.commands import BUILTIN, COMMAND_MODULES, COMMAND_OWNERS

    parser = argparse.ArgumentParser(
        prog="odf", description="odf-node: an Open Data Fabric repository node"
    )
    parser.add_argument(
        "--workspace",
        "-w",
        metavar="DIR",
        help=f"workspace directory (default: ${WORKSPACE_ENV} or search upwards from cwd)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    owner = COMMAND_OWNERS.get(command or "")
    if owner == BUILTIN:
        _BUILTINS[command or ""](sub)
        return parser
    if owner is None:
        for add in _BUILTINS.values():
            add(sub)
    for name in (owner,) if owner is not None else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def command_word(argv: Sequence[str]) -> str | None:
    """The top-level command named in ``argv``, or ``None`` when the whole tree is needed.

    Skips only the global option's exact spellings (``-w DIR``, ``-wDIR``, ``--workspace
    DIR``, ``--workspace=DIR``): any other option before the command (``--help``, an
    abbreviation such as ``--work``, a typo) gives ``None``, so argparse sees the whole
    tree and answers as it always did.
    """
    args = iter(argv)
    for arg in args:
        if arg in ("-w", "--workspace"):
            next(args, None)
        elif arg.startswith("--workspace=") or (arg.startswith("-w") and arg != "-w"):
            continue
        elif arg.startswith("-"):
            return None
        else:
            return arg
    return None


def _cmd(
    sub: Any, name: str, fn: Callable[[argparse.Namespace], int], help: str
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    p.set_defaults(func=fn)
    return p


def _add_init(sub: Any) -> None:
    p = _cmd(sub, "init", cmd_init, "create a workspace (.odf/) in the current directory")
    p.add_argument("--exist-ok", action="store_true", help="do nothing if it already exists")


def _add_add(sub: Any) -> None:
    p = _cmd(sub, "add", cmd_add, "add datasets from DatasetSnapshot manifests")
    from node.commands.add import add_arguments  # only `odf add` pays for it

    add_arguments(p)


def _add_list(sub: Any) -> None:
    p = _cmd(sub, "list", cmd_list, "list datasets in the workspace")
    _add_format(p, OUTPUT_FORMATS, "table")


def _add_log(sub: Any) -> None:
    p = _cmd(sub, "log", cmd_log, "show a dataset's metadata chain, newest first")
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("-n", "--limit", type=int, default=None, help="show at most N blocks")
    p.add_argument("--full-hashes", action="store_true", help="print full block hashes")
    _add_format(p, OUTPUT_FORMATS, "table")


def _add_delete(sub: Any) -> None:
    p = _cmd(sub, "delete", cmd_delete, "delete datasets from the workspace")
    p.add_argument("dataset", nargs="+", help="dataset aliases or DIDs")
    p.add_argument(
        "-r", "--recursive", action="store_true",
        help="also delete every dataset that reads them (refused otherwise)",
    )  # fmt: skip
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


def _add_verify(sub: Any) -> None:
    p = _cmd(
        sub,
        "verify",
        cmd_verify,
        "verify datasets: hashes, chain rules, and replay of every transform on the engine",
    )
    p.add_argument("dataset", nargs="*", help="dataset aliases or DIDs (default: all)")
    p.add_argument(
        "--integrity",
        action="store_true",
        help="check chain rules and every object's size and physical hash only (no replay)",
    )
    p.add_argument(
        "--logical-hashes",
        action="store_true",
        help="with --integrity: also recompute data slices' logical hashes (a full verify does)",
    )
    p.add_argument("-r", "--recursive", action="store_true", help="verify upstream derivatives too")
    p.add_argument(
        "--trust",
        type=int,
        metavar="N",
        help="accept the head when N distinct validators attested `reproduced` (no replay)",
    )
    p.add_argument(
        "--validator",
        action="append",
        default=[],
        metavar="DID",
        help="with --trust: count only these validators (repeatable)",
    )
    _add_format(p, OUTPUT_FORMATS, "table")


def _add_gc(sub: Any) -> None:
    p = _cmd(sub, "gc", cmd_gc, "delete objects no dataset references")
    p.add_argument("--dry-run", action="store_true", help="only report what would be deleted")


def _add_block(sub: Any) -> None:
    block = sub.add_parser("block", help="encode/decode single metadata blocks")
    bsub = block.add_subparsers(dest="block_command", required=True, metavar="COMMAND")
    p = bsub.add_parser("encode", help="encode a MetadataBlock YAML manifest to binary")
    p.set_defaults(func=cmd_block_encode)
    p.add_argument("manifest", help="MetadataBlock manifest (YAML), or - for stdin")
    p.add_argument(
        "--block-version",
        type=int,
        choices=[2, 3],
        default=None,
        help="binary layout version (default: the manifest's, else 2)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the binary block to FILE (- for stdout); the hash is always printed",
    )
    p = bsub.add_parser("decode", help="decode a binary block to YAML/JSON")
    p.set_defaults(func=cmd_block_decode)
    p.add_argument("file", help="binary block file, or - for stdin")
    p.add_argument("--output-format", choices=["yaml", "json"], default="yaml")


def _add_hash(sub: Any) -> None:
    hsub = sub.add_parser("hash", help="compute data hashes").add_subparsers(
        dest="hash_command", required=True, metavar="COMMAND"
    )
    p = hsub.add_parser("logical", help="logical hash of a Parquet file (f9680c00120...)")
    p.set_defaults(func=cmd_hash_logical)
    p.add_argument("file")
    p = hsub.add_parser("physical", help="physical hash of any file (f1620...)")
    p.set_defaults(func=cmd_hash_physical)
    p.add_argument("file")


#: The commands `node.cli` implements itself, each with the function adding its parser.
_BUILTINS: dict[str, Callable[[Any], None]] = {
    "init": _add_init,
    "add": _add_add,
    "list": _add_list,
    "log": _add_log,
    "delete": _add_delete,
    "verify": _add_verify,
    "gc": _add_gc,
    "block": _add_block,
    "hash": _add_hash,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``odf`` console script; returns the exit code."""
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(command_word(words)).parse_args(words)
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:
        return EXIT_OK
    except (OdfError, OSError) as e:
        return report_error(e, getattr(args, "command", None))
    except KeyboardInterrupt:
        # Quietly, like any Unix tool stopped with Ctrl-C (128 + SIGINT).
        return 130


def run() -> None:
    """Console-script wrapper: exits with `main`'s code, skipping native teardown.

    Python's own exit work runs (atexit handlers, logging shutdown, flushed stdio), then
    the process ends with ``os._exit``. This is a second guard: the abort at exit that
    issue 13 measured (SIGABRT, "terminate called without an active exception") came from
    an Arrow worker thread releasing a Python file object while the interpreter was
    finalizing; its root fix is `storage.hashing.arrow_input` (Arrow reads native files).
    Set ``ODF_NORMAL_EXIT=1`` to exit through a normal interpreter teardown instead: the
    CLI process test does, so that such a bug coming back is still caught.
    """
    import os

    try:
        code = main()
    except SystemExit as e:  # argparse (usage errors, --help)
        code = _exit_code(e.code)
    except BaseException:
        import traceback  # only a bug pays for it

        traceback.print_exc()
        code = 1
    if os.environ.get("ODF_NORMAL_EXIT") == "1":
        sys.exit(code)
    _exit_now(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _exit_now(code: int) -> None:
    import atexit
    import os

    # Only a process that imported logging has handlers to flush (importing it costs).
    logging = sys.modules.get("logging")
    try:
        atexit._run_exitfuncs()
        if logging is not None:
            logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a closed pipe must not turn success into an abort
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
