"""Validator attestations as rows (``odf attestations``, ``odf validate``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from p2p.attestation import Attestation

__all__ = ["attestation_row", "short_row"]


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
    out = dict(row)
    out["block"] = str(row["block"])[-12:]
    out["validator"] = str(row["validator"])[:20] + "..."
    return out
