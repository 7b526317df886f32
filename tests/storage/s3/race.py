"""Many processes committing to one dataset on S3 at once (the CAS proof).

`run_commit_race`: W processes x N commits (``SetInfo`` blocks, retried on a lost race)
into one dataset; afterwards the chain is walked from ``refs/head`` and must hold
exactly W x N new blocks, linked one after another, with every writer's every commit.
`run_create_race`: C processes create the same dataset (a Seed for one DID) at once;
exactly one may win. Used by ``tests/storage/s3/test_s3_race.py`` (small numbers) and
``scripts/bench/s3_race.py`` (8 x 20, 16 creators).

Each process is ``python -m tests.storage.s3.race commit|create URL ID [N] START``;
they wait until the wall-clock time START so that they start together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fbs.did import DatasetId
from fbs.model import DatasetKind, MetadataEvent, Seed, SetInfo
from fbs.multiformats import Multihash
from storage.chain import ChainState
from storage.errors import DatasetExists, RefCASFailed
from storage.s3.client import connect
from storage.s3.commit import S3Committer
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location, parse_s3_url

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
#: The dataset every race writes.
RACE_DID: Final = DatasetId.new_seeded(b"odf s3 race")
#: Seconds the processes are given to start before they begin together.
START_DELAY_S: Final = 4.0


def _layout(url: str) -> S3DatasetLayout:
    location = parse_s3_url(url)
    return S3DatasetLayout(connect(location), location)


def _commit_worker(url: str, writer: int, commits: int) -> dict[str, int]:
    committer = S3Committer(_layout(url))
    attempts = 0
    for i in range(commits):
        done = committer.commit(lambda _state, i=i: SetInfo(description=f"w{writer}-c{i}"))
        attempts += done.attempts
    return {"commits": commits, "attempts": attempts}


def _create_worker(url: str, writer: int) -> dict[str, int]:
    def seed(state: ChainState | None) -> MetadataEvent:
        if state is not None:
            raise DatasetExists(f"{url} exists")
        return Seed(dataset_id=RACE_DID, dataset_kind=DatasetKind.Root)

    committer = S3Committer(_layout(url), max_attempts=1)
    try:
        committer.commit(seed)
    except (RefCASFailed, DatasetExists):
        return {"won": 0, "writer": writer}
    return {"won": 1, "writer": writer}


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.storage.s3.race", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _gather(procs: list[subprocess.Popen[bytes]]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"race worker failed ({p.returncode}): {stderr.decode()[-2000:]}")
        out.append(json.loads(stdout))
    return out


@dataclass(frozen=True, slots=True)
class CommitRace:
    """What a commit race left: blocks above the Seed, attempts, and the checks' findings."""

    new_blocks: int
    attempts: int
    linear: bool
    lost: int
    seconds: float


def walk(layout: S3DatasetLayout) -> list[tuple[Multihash, int, MetadataEvent]]:
    """``(hash, sequence number, event)`` from the head back (each block hashed first)."""
    from fbs.codec import decode_block

    out = []
    h = layout.refs.get_or_none("head")
    while h is not None:
        block = decode_block(layout.blocks.get(h))
        out.append((h, block.sequence_number, block.event))
        h = block.prev_block_hash
    return out


def run_commit_race(location: S3Location, writers: int, commits: int) -> CommitRace:
    """Create the dataset, race ``writers`` processes x ``commits``, check the chain."""
    url = location.to_url()
    layout = _layout(url)
    S3Committer(layout).commit(lambda _s: Seed(dataset_id=RACE_DID, dataset_kind=DatasetKind.Root))
    start = time.time() + START_DELAY_S
    procs = [_spawn(["commit", url, str(w), str(commits), str(start)]) for w in range(writers)]
    results = _gather(procs)
    seconds = time.time() - start
    chain = walk(layout)
    linear = [seq for _h, seq, _e in chain] == list(range(len(chain) - 1, -1, -1))
    found = {e.description for _h, _s, e in chain if isinstance(e, SetInfo)}
    wanted = {f"w{w}-c{i}" for w in range(writers) for i in range(commits)}
    return CommitRace(
        len(chain) - 1, sum(r["attempts"] for r in results), linear, len(wanted - found), seconds
    )


def run_create_race(location: S3Location, creators: int) -> int:
    """Race ``creators`` processes creating one dataset; the number of winners."""
    url = location.to_url()
    start = time.time() + START_DELAY_S
    procs = [_spawn(["create", url, str(w), str(start)]) for w in range(creators)]
    return sum(r["won"] for r in _gather(procs))


def main(argv: list[str]) -> None:
    """The worker process: ``commit URL ID N START`` or ``create URL ID START``."""
    kind, url, writer = argv[0], argv[1], int(argv[2])
    time.sleep(max(0.0, float(argv[-1]) - time.time()))
    if kind == "commit":
        result = _commit_worker(url, writer, int(argv[3]))
    else:
        result = _create_worker(url, writer)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
