"""Validator attestations as rows (``odf attestations``, ``odf validate``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from p2p.attestation import Attestation

__all__ = ["ATTESTATION_COLUMNS", "attestation_row", "short_row"]

#: Columns of the ``odf attestations`` table.
ATTESTATION_COLUMNS = ("seq", "block", "validator", "verdict", "detail", "engine", "time")


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


def short_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row fitted to a terminal table (block hashes and validator DIDs shortened at both ends)."""
    from node.render.columns import fit_attestation_row

    return fit_attestation_row(row)
