"""How derivative pulls and replays are shown (`odf pull`, `odf verify`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from node.transform import PullResult
    from node.validation.replay import ReplayReport

__all__ = [
    "print_pull_rows",
    "print_replay_rows",
    "pull_result_rows",
    "replay_report_rows",
]


def pull_result_rows(result: PullResult) -> list[dict[str, Any]]:
    """Plain rows of a `node.transform.PullResult` (upstream first)."""
    rows = []
    for r in (*result.upstream, result):
        rows.append(
            {
                "dataset": r.alias,
                "status": str(r.status),
                "records": r.num_records,
                "watermark": str(r.new_watermark) if r.new_watermark else None,
                "head": str(r.new_head),
                "warnings": list(r.warnings),
            }
        )
    return rows


def print_pull_rows(rows: list[dict[str, Any]], fmt: str) -> None:
    """`pull_result_rows` as a table (one line per dataset, warnings on stderr) or ``fmt``."""
    if fmt != "table":
        from node.render.output import render

        render(rows, fmt)
        return
    for row in rows:
        detail = f", {row['records']} record(s)" if row["status"] == "updated" else ""
        print(f"{row['dataset']}: {row['status']}{detail}")
        for w in row["warnings"]:
            sys.stderr.write(f"odf: warning: {row['dataset']}: {w}\n")


def replay_report_rows(report: ReplayReport) -> list[dict[str, Any]]:
    """Plain rows of a `node.validation.replay.ReplayReport` (upstream first)."""
    rows = []
    for r in (*report.upstream, report):
        first = r.integrity.first_bad_block
        rows.append(
            {
                "dataset": r.alias,
                "id": str(r.dataset_id),
                "ok": r.ok,
                "integrity": r.integrity.ok,
                "integrityProblem": first.message if first else None,
                "transformsReplayed": r.transforms_replayed,
                "mismatch": str(r.mismatch) if r.mismatch else None,
                "mismatchBlock": str(r.mismatch.block_hash) if r.mismatch else None,
                "mismatchField": r.mismatch.field if r.mismatch else None,
                "engine": r.engine_identity,
                "pinnedEngines": list(r.pinned_identities),
                "warnings": list(r.warnings),
            }
        )
    return rows


def print_replay_rows(rows: list[dict[str, Any]], fmt: str) -> None:
    """`replay_report_rows` as a table (problems indented, warnings on stderr) or ``fmt``."""
    if fmt != "table":
        from node.render.output import render

        render(rows, fmt)
        return
    for row in rows:
        status = "OK" if row["ok"] else "FAILED"
        print(f"{row['dataset']}: {status} ({row['transformsReplayed']} transform(s) replayed)")
        if row["integrityProblem"]:
            print(f"  - integrity: {row['integrityProblem']}")
        if row["mismatch"]:
            print(f"  - replay: {row['mismatch']}")
        for w in row["warnings"]:
            sys.stderr.write(f"odf: warning: {row['dataset']}: {w}\n")
