"""``odf verify [DS...]``: integrity (every block, object and logical hash, every chain
rule) then the replay of every transform on the engine (`node.usecases.verify`).

``--integrity`` skips replay and checks every object by size and physical hash
(``--logical-hashes``: also the slices' logical hashes); ``--trust N`` accepts a head that
N validators attested ``reproduced``. A replica whose head its publisher never signed
fails integrity (a block made here forks it). A dataset that does not verify exits 5.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, add_command, add_output_format, open_workspace
from node.errors import VerificationFailed
from node.render.output import OUTPUT_FORMATS, render

if TYPE_CHECKING:
    from node.usecases.verify import IntegrityOutcome, VerifyOptions
    from storage.verify import VerifyReport

__all__ = ["cmd_verify", "cmd_verify_replay", "register"]


def _options(args: argparse.Namespace) -> VerifyOptions:
    from node.usecases.verify import VerifyOptions

    return VerifyOptions(
        datasets=tuple(args.dataset),
        integrity=getattr(args, "integrity", False),
        logical_hashes=getattr(args, "logical_hashes", False),
        recursive=getattr(args, "recursive", False),
        trust=getattr(args, "trust", None),
        validators=tuple(getattr(args, "validator", ())),
    )


def _fail_if_any(rows: list[dict[str, Any]], what: str) -> int:
    failed = [r for r in rows if not r["ok"]]
    if failed:
        names = ", ".join(r["dataset"] for r in failed)
        raise VerificationFailed(f"{what}: {names}", failed)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from node.usecases.verify import check_options, verify_integrity

    options = _options(args)
    check_options(options)
    if options.trust is not None:
        return _verify_trust(args, options)
    if not options.integrity:
        return cmd_verify_replay(args)
    outcome = verify_integrity(open_workspace(args), options)
    rows = [_integrity_row(entry.alias, str(entry.id), r) for entry, r in outcome.reports]
    _add_unsigned_heads(rows, outcome)
    _warn_temp_files(rows, outcome)
    if args.output_format == "table":
        _print_integrity(rows)
    else:
        render(rows, args.output_format)
    return _fail_if_any(rows, "verification failed")


def _integrity_row(alias: str, did: str, report: VerifyReport) -> dict[str, Any]:
    return {
        "dataset": alias,
        "id": did,
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


def _add_unsigned_heads(rows: list[dict[str, Any]], outcome: IntegrityOutcome) -> None:
    """A replica whose head its publisher never signed fails; one only behind the signed
    head (an interrupted pull) gets a warning."""
    by_id = {r["id"]: r for r in rows}
    for finding in outcome.unsigned:
        row = by_id[str(finding.entry.id)]
        if not finding.forked:
            row["warnings"].append({"kind": "behind", "message": finding.message, "path": None})
            continue
        row["ok"] = False
        row["problems"].append(
            {
                "kind": "unsigned-head",
                "message": finding.message,
                "block": row["head"],
                "sequenceNumber": None,
                "object": None,
                "rule": None,
            }
        )


def _warn_temp_files(rows: list[dict[str, Any]], outcome: IntegrityOutcome) -> None:
    """Temp files are warnings (never referenced, invisible to readers): `storage.verify`."""
    from storage.verify import temp_file_warning

    for r in rows:
        for w in r["warnings"]:
            sys.stderr.write(f"odf: warning: {r['dataset']}: {w['message']}\n")
    for t in outcome.temp_files:
        sys.stderr.write(f"odf: warning: {temp_file_warning(t.path, t.age_s, t.stale).message}\n")


def _print_integrity(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        status = "OK" if r["ok"] else "FAILED"
        print(f"{r['dataset']}: {status} ({r['blocks']} blocks, {r['objects']} objects)")
        for problem in r["problems"]:
            seq = problem["sequenceNumber"]
            where = f" (block #{seq})" if seq is not None else ""
            print(f"  - {problem['kind']}{where}: {problem['message']}")


def cmd_verify_replay(args: argparse.Namespace) -> int:
    """Full verification (integrity + replay) of ``args.dataset`` (list; empty = all)."""
    from node.render.transform import print_replay_rows, replay_report_rows
    from node.usecases.verify import signed_heads, verify_replay

    ws, options = open_workspace(args), _options(args)
    rows: list[dict[str, Any]] = []
    for report in verify_replay(ws, options):
        rows += replay_report_rows(report)
    print_replay_rows(rows, getattr(args, "output_format", "table"))
    forked = [f for f in signed_heads(ws, options) if f.forked]
    for f in forked:
        print(f"{f.entry.alias}: FAILED: {f.message}")
    if forked:
        names = ", ".join(f.entry.alias for f in forked)
        raise VerificationFailed(f"verification failed: {names}", forked)
    return _fail_if_any(rows, "verification failed")


def _verify_trust(args: argparse.Namespace, options: VerifyOptions) -> int:
    """Accept heads on validators' attestations instead of replaying locally."""
    from node.usecases.verify import verify_trust

    rows: list[dict[str, Any]] = []
    for entry, report in verify_trust(open_workspace(args), options):
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
        _print_trust(rows)
    else:
        render(rows, args.output_format)
    return _fail_if_any(rows, f"not verified by {args.trust} validator(s)")


def _print_trust(rows: list[dict[str, Any]]) -> None:
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


def register(sub: Any) -> None:
    """Add ``verify`` to the ``odf`` sub-parsers."""
    p = add_command(
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
    add_output_format(p, OUTPUT_FORMATS, "table")
