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

from node.cli_util import EXIT_OK, open_workspace
from node.render.attestations import ATTESTATION_COLUMNS, attestation_row, short_row

if TYPE_CHECKING:
    from node.validation.disputes import PublisherRecord

__all__ = ["ATTEST_HELP", "cmd_attestations", "register"]

#: The description of ``odf attestations`` and ``odf validate`` (this module's doc).
ATTEST_HELP = __doc__


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
                [short_row(r) for r in rows],
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


def register(sub: Any) -> None:
    """Add ``attestations`` to the top-level sub-parsers."""
    from node.render.output import OUTPUT_FORMATS

    p = sub.add_parser(
        "attestations",
        help="list validator attestations held for a dataset",
        description=ATTEST_HELP,
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
