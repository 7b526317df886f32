"""The tree of another revision, for benchmarks that compare against it in the same run.

`archive` extracts ``git archive REV`` of this repository; a child process runs that tree
with ``PYTHONPATH`` set to it (the venv's editable install comes after ``PYTHONPATH``).
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def archive(rev: str, dest: Path) -> Path:
    """Extract ``git archive rev`` of this repository into ``dest / "tree"``; that folder."""
    tar = dest / "tree.tar"
    with tar.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=out, check=True)
    tree = dest / "tree"
    with tarfile.open(tar) as t:
        t.extractall(tree, filter="data")
    tar.unlink()
    return tree
