"""``odf validate DS...``: check not-yet-checked blocks here and sign attestations
(see ``odf attestations`` for what the validator checks)."""

from __future__ import annotations

import argparse
from typing import Any

from node.cli_util import EXIT_OK, EXIT_VERIFY_FAILED, open_workspace
from node.render.attestations import attestation_row, short_row
from node.render.progress import step

__all__ = ["cmd_validate", "register"]


def cmd_validate(args: argparse.Namespace) -> int:
    """Run the validator once on the named datasets."""
    from node.render.output import render
    from node.validation.validator import Validator, load_or_create_validator_key
    from p2p.attestation import Verdict

    ws = open_workspace(args)
    key = load_or_create_validator_key(ws)
    validator = Validator(ws, key)
    code = EXIT_OK
    docs: list[dict[str, Any]] = []
    for ref in args.dataset:
        with step(f"validating {ref} (replays its transforms on the engine)"):
            run = validator.validate(
                ref, max_blocks=args.max_blocks, retry_could_not_check=args.retry
            )
        if run.count(Verdict.DIVERGED):
            code = EXIT_VERIFY_FAILED
        rows = [attestation_row(a) for a in run.attestations]
        if args.output_format == "table":
            # The validator's DID on a line of its own: a table title would fold it.
            print(f"validator: {key.dataset_id.to_did_key()}")
            render(
                [short_row(r) for r in rows],
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
    """Add ``validate`` to the top-level sub-parsers."""
    from node.commands.attestations import ATTEST_HELP
    from node.render.output import OUTPUT_FORMATS

    v = sub.add_parser(
        "validate",
        help="check not-yet-checked blocks here and sign attestations",
        description=ATTEST_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.set_defaults(func=cmd_validate)
    v.add_argument("dataset", nargs="+", help="dataset aliases or DIDs")
    v.add_argument("--max-blocks", type=int, default=None, help="check at most N blocks each")
    v.add_argument(
        "--retry", action="store_true", help="check again blocks that could not be checked"
    )
    v.add_argument("-o", "--output-format", choices=OUTPUT_FORMATS, default="table")
