"""Tables people copy from: whole values on unfolded lines, or values shortened to fit.

A table cell folded over two lines cannot be copied (a DID, a hash). `wide_table` lays
rows out as aligned columns, one line per row whatever its width; `short_did_key` and
`fit_attestation_row` shorten a row so that the default table fits 120 columns unfolded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["SHORT_KEY_CHARS", "fit_attestation_row", "short_did_key", "wide_table"]

#: Characters of a ``did:key`` kept after its fixed ``z6Mk`` start and at its end.
SHORT_KEY_CHARS: Final = 6


def short_did_key(did: str) -> str:
    """``did:key:z6MkpTHR8V...sdvktH``: both ends of a ``did:key`` (short ones whole).

    Every ed25519 ``did:key`` starts ``z6Mk``: the characters after it and the last
    ones tell keys apart at a glance.
    """
    prefix = "did:key:"
    key = did.removeprefix(prefix)
    keep = len("z6Mk") + SHORT_KEY_CHARS
    if len(key) <= keep + SHORT_KEY_CHARS + 3:
        return did
    return f"{did[: len(did) - len(key)]}{key[:keep]}...{key[-SHORT_KEY_CHARS:]}"


def fit_attestation_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """An attestation row shortened for the default table (``--wide``: whole).

    The block hash keeps its last 12 characters, the validator both ends, the engine
    its name ("spark", without versions) and the time its seconds.
    """
    out = dict(row)
    out["block"] = str(row["block"])[-12:]
    if isinstance(row.get("validator"), str):
        out["validator"] = short_did_key(row["validator"])
    if isinstance(row.get("engine"), str):
        out["engine"] = row["engine"].split(" (", 1)[0]
    if isinstance(row.get("time"), str):
        out["time"] = row["time"][:19] + "Z"
    return out


def wide_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as columns aligned by two spaces, every value whole, one line per row."""
    cells = [[str(c) for c in columns]]
    cells += [["" if r.get(c) is None else str(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in cells
    )
