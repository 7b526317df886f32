# ruff: noqa: F811  (the S3 fixtures are imported, then named as test arguments)
"""``odf push --to s3+http://…`` and ``odf pull s3+http://…`` as kamu users run them (processes).

Credentials come from the standard AWS environment variables (set by the fixture).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from node.cli_util import EXIT_INVALID, EXIT_OK
from storage.s3.url import S3Location
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace
from tests.storage.s3.conftest import (  # noqa: F401
    s3_client,
    s3_location,
    seaweed,
    seaweed_client,
)
from tests.storage.s3.nocas_server import nocas_server


def odf(ws: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    return subprocess.run(
        [exe, "--workspace", str(ws), *argv], capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_push_and_pull_through_the_cli(tmp_path: Path, s3_location: S3Location) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", slices=2)
    url = s3_location.child("prices").to_url()
    pushed = odf(src.root, "push", "prices", "--to", url)
    assert pushed.returncode == EXIT_OK, pushed.stderr
    assert "Pushed prices" in pushed.stdout

    dst_root = tmp_path / "dst"
    new_workspace(dst_root)
    pulled = odf(dst_root, "pull", url)
    assert pulled.returncode == EXIT_OK, pulled.stderr
    assert Workspace.open(dst_root).get("prices").head() == ds.head()
    assert odf(dst_root, "verify", "prices", "--integrity").returncode == EXIT_OK

    # The aliases remembered: a later push needs no --to, a later pull no URL.
    add_slices(ds, tmp_path / "more", 1)
    again = odf(src.root, "push", "prices")
    assert again.returncode == EXIT_OK, again.stderr
    update = odf(dst_root, "pull", "prices")
    assert update.returncode == EXIT_OK, update.stderr
    assert Workspace.open(dst_root).get("prices").head() == ds.head()


def test_push_to_a_store_without_conditional_writes_is_one_typed_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    src = new_workspace(tmp_path / "src")
    make_dataset(src, "prices", tmp_path / "files", slices=1)
    with nocas_server() as (endpoint, objects, _writes):
        r = odf(src.root, "push", "prices", "--to", f"s3+{endpoint}/bucket/repo/prices")
        assert objects == {}
    assert r.returncode == EXIT_INVALID
    assert r.stderr.startswith("odf: error: ") and r.stderr.count("\n") == 1
    assert "ignores If-None-Match" in r.stderr
