"""A writer killed (SIGKILL, a real process) after its uploads, before its ref moves.

The head stays where it was; what the writer uploaded is unreferenced. GC keeps it
inside the grace period (the writer could still be alive and about to commit) and
deletes it after, on S3 (SeaweedFS) as on local disk (`tests.storage.test_gc_crash`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from node.cli_util import EXIT_OK
from p2p.s3.push import push_to_s3
from storage.gc import DEFAULT_GC_GRACE_S
from storage.s3.client import S3Client
from storage.s3.gc import collect_s3_garbage, referenced_keys
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace
from tests.storage.gc_crash_writer import run_until_uploaded


def odf(ws: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    return subprocess.run(
        [exe, "--workspace", str(ws), *argv], capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_s3_orphan_survives_the_grace_period_then_goes(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    ws = new_workspace(tmp_path / "ws")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=1)
    loc = s3_location.child("prices")
    layout = S3DatasetLayout(s3_client, loc)
    pushed = push_to_s3(ds, loc, alias="prices")
    referenced = referenced_keys(layout)
    add_slices(ds, tmp_path / "more", 2, checkpoints=True)
    run_until_uploaded("s3", str(ws.root), "prices", loc.to_url())
    assert layout.refs.get("head") == pushed.new_head
    orphans = {k for k, _ in s3_client.list_keys(loc.prefix + "/")} - referenced
    orphans = {k for k in orphans if "/info/" not in k and "/refs/" not in k}
    # The two new slices, their checkpoints and the two blocks naming them.
    assert len(orphans) == 6
    inside = collect_s3_garbage(layout)
    assert inside.deleted == () and set(inside.kept_recent) == orphans
    dry = odf(ws.root, "gc", loc.to_url(), "--dry-run", "--grace-period", "0")
    assert dry.returncode == EXIT_OK, dry.stderr
    assert "Would delete 6 unreferenced object(s)" in dry.stdout
    newest = max(s.mtime for k, s in s3_client.list_keys(loc.prefix + "/") if k in orphans)
    after = collect_s3_garbage(layout, now=newest + DEFAULT_GC_GRACE_S)
    assert set(after.deleted) == orphans and after.referenced == len(referenced)
    assert referenced_keys(layout) == referenced
    # A retry pushes everything again and commits.
    again = push_to_s3(ds, loc, alias="prices")
    assert (again.old_head, again.new_head) == (pushed.new_head, ds.head())


@pytest.mark.slow
def test_s3_a_push_reusing_orphans_restarts_their_age(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    ws = new_workspace(tmp_path / "ws")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=1)
    loc = s3_location.child("prices")
    layout = S3DatasetLayout(s3_client, loc)
    push_to_s3(ds, loc, alias="prices")
    add_slices(ds, tmp_path / "more", 1)
    new = next(h for h in ds.layout.data.iter_hashes() if not layout.data.has(h))
    layout.data.put_file(new, ds.layout.data.path_of(new))  # an orphan of a dead push
    h, raw, _b = next(iter(ds.iter_blocks()))
    layout.blocks.put(h, raw)
    orphans = {layout.data.key_of(new), layout.blocks.key_of(h)}
    again = push_to_s3(ds, loc, alias="prices")
    assert again.objects_present == 1 and again.objects_pushed == 0
    assert layout.refs.get("head") == ds.head()
    for key in orphans:  # re-used: copied onto itself, so its LastModified restarted
        meta = s3_client.raw.head_object(Bucket=s3_client.bucket, Key=key)["Metadata"]
        assert meta == {"odf-touched": "1"}
    assert collect_s3_garbage(layout, grace_period_s=0).deleted == ()
