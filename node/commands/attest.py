"""``odf attestations DS`` (who checked what) and ``odf validate DS`` (check here, sign).

``odf attestations`` lists the validator attestations held for a dataset's current
chain: block, validator (``did:key``), verdict, the differing field or the reason, the
engine used and when (the table shortens block hashes and validator DIDs: ``--wide``
and ``-o json`` show them whole); the dataset is marked DISPUTED when some validator found a block
that does not reproduce. ``--evidence`` adds what is held against the dataset's
publisher (`node.validation.disputes`): the ``diverged`` attestations per block, with their
validators, and equivocation evidence (two heads signed for one sequence number).

``odf validate`` runs the validator once, locally: every data block not yet attested by
this workspace's validator key (``.odf/p2p/validator.key``, created on first use) is
checked (root: objects; derivative: objects and a replay of the block on the engine),
and a signed attestation is stored and printed for each. Exit code 5 when a block
diverged.

`verify_with_trust` (``odf verify --trust N``) is `node.validation.trust.verify_with_trust`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_INVALID, EXIT_OK, EXIT_VERIFY_FAILED, err, open_workspace

if TYPE_CHECKING:
    from node.validation.disputes import PublisherRecord
    from node.validation.trust import TrustReport, verify_with_trust
    from p2p.attestation import Attestation

__all__ = [
    "TrustReport",
    "attestation_row",
    "register",
    "verify_with_trust",
]


def __getattr__(name: str) -> Any:
    # `TrustReport` and `verify_with_trust` are re-exported lazily: importing node.validation.trust
    # (p2p, the codec) at parser-build time would slow down every `odf` command.
    if name in ("TrustReport", "verify_with_trust"):
        import node.validation.trust

        return getattr(node.validation.trust, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def attestation_row(a: Attestation) -> dict[str, Any]:
    """One attestation as a flat row (table and JSON output)."""
    return {
        "seq": a.sequence_number,
        "block": a.block_hash.to_multibase(),
        "validator": a.validator.to_did_key(),
        "verdict": str(a.verdict),
        "detail": a.detail,
        "engine": a.engine,
        "time": a.system_time.to_rfc3339(),
    }


#: Columns of the ``odf attestations`` table.
ATTESTATION_COLUMNS = ("seq", "block", "validator", "verdict", "detail", "engine", "time")


def _short_row(row: dict[str, Any]) -> dict[str, Any]:
    from node.render.columns import fit_attestation_row

    return fit_attestation_row(row)


def cmd_attestations(args: argparse.Namespace) -> int:
    """List the attestations held for a dataset."""
    from fbs.multiformats import SHA3_256, parse_hash
    from node.render.output import render
    from p2p.attestation_store import AttestationStore

    ws = open_workspace(args)
    entry = ws.resolve(args.dataset)
    store = AttestationStore.for_workspace(ws)
    status = store.status(entry.id)
    items = list(status.attestations)
    if args.block:
        block = parse_hash(args.block, code=SHA3_256)
        items = [a for a in items if a.block_hash == block]
    rows = [attestation_row(a) for a in items]
    record = None
    if args.evidence:
        from node.validation.disputes import publisher_record

        record = publisher_record(ws, entry.id, store=store)
    if args.output_format == "table":
        state = "DISPUTED" if status.disputed else "not disputed"
        title = f"{entry.alias}: {len(rows)} attestations, {state}"
        if status.pending:
            title += f", {status.pending} queued"
        if args.wide:
            from node.render.columns import wide_table

            print(title)
            sys.stdout.write(wide_table(rows, ATTESTATION_COLUMNS))
        else:
            render(
                [_short_row(r) for r in rows],
                "table",
                columns=list(ATTESTATION_COLUMNS),
                title=title + (" (--wide: whole hashes and DIDs)" if rows else ""),
            )
        if record is not None:
            _print_evidence(record)
    else:
        doc: dict[str, Any] = {
            "dataset": entry.alias,
            "datasetId": entry.id.to_did_odf(),
            "head": None if status.head is None else status.head.to_multibase(),
            "disputed": status.disputed,
            "disputedBlocks": [h.to_multibase() for h in status.disputed_blocks],
            "pending": status.pending,
            "attestations": rows,
        }
        if record is not None:
            doc["evidence"] = record.to_dict()
        render(doc, args.output_format)
    return EXIT_OK


def _print_evidence(record: PublisherRecord) -> None:
    if not record.has_evidence:
        print("No evidence against the publisher")
        return
    for ev in record.divergence:
        who = ", ".join(v.to_did_key() for v in ev.validators)
        print(
            f"Divergence: block #{ev.sequence_number} ({ev.block_hash}) field(s) "
            f"{', '.join(ev.fields)}; signed by {who}"
        )
    for eq in record.equivocation:
        print(
            f"Equivocation: two heads signed for sequence number {eq.sequence_number}: "
            f"{eq.first.head} and {eq.second.head} (evidence: {eq.path})"
        )


def cmd_validate(args: argparse.Namespace) -> int:
    """Run the validator once on the named datasets."""
    from node.render.output import render
    from node.validation.validator import Validator, load_or_create_validator_key
    from p2p.attestation import Verdict
    from p2p.errors import IdentityError

    ws = open_workspace(args)
    try:
        key = load_or_create_validator_key(ws)
    except IdentityError as e:
        err(str(e))
        return EXIT_INVALID
    validator = Validator(ws, key)
    code = EXIT_OK
    docs: list[dict[str, Any]] = []
    for ref in args.dataset:
        run = validator.validate(ref, max_blocks=args.max_blocks, retry_could_not_check=args.retry)
        if run.count(Verdict.DIVERGED):
            code = EXIT_VERIFY_FAILED
        rows = [attestation_row(a) for a in run.attestations]
        if args.output_format == "table":
            # The validator's DID on a line of its own: a table title would fold it.
            print(f"validator: {key.dataset_id.to_did_key()}")
            render(
                [_short_row(r) for r in rows],
                "table",
                columns=["seq", "block", "verdict", "detail"],
                title=f"{run.alias}: {len(rows)} blocks checked, backlog {run.backlog}",
            )
        else:
            docs.append(
                {
                    "dataset": run.alias,
                    "datasetId": run.dataset_id.to_did_odf(),
                    "validator": key.dataset_id.to_did_key(),
                    "backlog": run.backlog,
                    "attestations": rows,
                }
            )
    if args.output_format != "table":
        render(docs, args.output_format)
    return code


def register(sub: Any) -> None:
    """Add ``attestations`` and ``validate`` to the top-level sub-parsers."""
    from node.render.output import OUTPUT_FORMATS

    p = sub.add_parser(
        "attestations",
        help="list validator attestations held for a dataset",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=cmd_attestations)
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("--block", help="only this block (hash)")
    p.add_argument(
        "--evidence",
        action="store_true",
        help="also show the evidence held against the publisher (divergence, equivocation)",
    )
    p.add_argument("-o", "--output-format", choices=OUTPUT_FORMATS, default="table")
    p.add_argument(
        "--wide",
        action="store_true",
        help="table: whole block hashes and validator DIDs, one line per attestation",
    )

    v = sub.add_parser(
        "validate",
        help="check not-yet-checked blocks here and sign attestations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.set_defaults(func=cmd_validate)
    v.add_argument("dataset", nargs="+", help="dataset aliases or DIDs")
    v.add_argument("--max-blocks", type=int, default=None, help="check at most N blocks each")
    v.add_argument(
        "--retry", action="store_true", help="check again blocks that could not be checked"
    )
    v.add_argument("-o", "--output-format", choices=OUTPUT_FORMATS, default="table")
