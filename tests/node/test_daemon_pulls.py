"""The daemon's pull retry policy: busy peers never make a follower drop a head.

`PullScheduler._pull_once` is replaced by a scripted one (the transfer itself is tested
in tests/p2p); what is tested here is when the scheduler tries again, when it stops,
and what it reports.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from node.daemon.config import NodeConfig
from node.daemon.follow import FollowList
from node.daemon.pulls import MAX_RETRY_DELAY_S, PeerView, PullScheduler, retry_delay
from node.worker_threads import WorkerThreads
from p2p.errors import PeerUnavailable, RemoteError
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore
from p2p.libp2p.host import P2PHost
from p2p.peers import PeerScores
from p2p.sync import PullResult
from storage.workspace import Workspace
from tests.p2p.sync_helpers import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")


class Scripted(PullScheduler):
    """`_pull_once` fails with ``busy`` while ``busy_until`` is above the call count."""

    def __init__(self, tmp: Path, busy_until: int, *, attempts: int = 2) -> None:
        ws = Workspace.init(tmp)
        cfg = NodeConfig(pull_attempts=attempts, pull_retry_delay_s=0.05)
        pulled: list[HeadRecord] = []

        async def refusal(_did: object) -> None:
            return None

        async def on_pulled(_did: object, record: HeadRecord) -> None:
            pulled.append(record)

        super().__init__(
            ws,
            cfg,
            P2PHost(),
            HeadStore.for_workspace(ws.root),
            PeerScores(),
            PeerView(),
            FollowList(ws, (), lambda: None),
            refusal=refusal,
            on_pulled=on_pulled,
            on_equivocation=lambda: None,
            threads=WorkerThreads(),
        )
        self.busy_until = busy_until
        self.calls: list[int] = []
        self.pulled = pulled

    async def _pull_once(self, record: HeadRecord, providers: Sequence[str]) -> PullResult:
        self.calls.append(record.sequence_number)
        if len(self.calls) <= self.busy_until:
            if len(self.calls) % 2:
                raise RemoteError("busy", "try later")
            raise PeerUnavailable("no reachable peer serves it (all busy)")
        return PullResult(record.dataset_id, "x", None, record.head)


def rec(key: KeyPair, seq: int) -> HeadRecord:
    return sign_head(key, Multihash.sha3_256(b"%d" % seq), seq, T0)


async def _settle(s: Scripted, timeout: float = 30.0) -> None:
    await wait_for(lambda: not s.wants, "every wanted record to be pulled", timeout)


async def test_a_busy_source_is_retried_past_pull_attempts_until_the_head_is_fetched(
    tmp_path: Path,
) -> None:
    s = Scripted(tmp_path, busy_until=5, attempts=2)
    key = KeyPair.generate()
    s.queue(rec(key, 1), "peer-a")
    await _settle(s)
    assert len(s.calls) == 6  # 5 busy answers, then the pull that worked
    assert [r.sequence_number for r in s.pulled] == [1]
    details = [(r.ok, r.detail.split(":")[0]) for r in s.history]
    # Reported once when it crossed pull_attempts, never dropped; then the success.
    assert details == [(False, "still failing, retrying"), (True, "ok")]


async def test_a_newer_record_wakes_a_waiting_retry_and_supersedes_the_old_one(
    tmp_path: Path,
) -> None:
    s = Scripted(tmp_path, busy_until=6, attempts=1)
    key = KeyPair.generate()
    s.queue(rec(key, 1), "peer-a")
    # Wait until the retry delay has grown well past what the test could wait for.
    await wait_for(lambda: len(s.calls) >= 6, "six busy answers", 30.0)
    s.queue(rec(key, 2), "peer-b")  # wakes the wait at once: no multi-second sleep
    await _settle(s, 5.0)
    assert [r.sequence_number for r in s.pulled] == [2]
    assert s.calls[-1] == 2


async def test_a_new_provider_wakes_a_waiting_retry(tmp_path: Path) -> None:
    s = Scripted(tmp_path, busy_until=6, attempts=1)
    record = rec(KeyPair.generate(), 3)
    s.queue(record, "peer-a")
    await wait_for(lambda: len(s.calls) >= 6, "six busy answers", 30.0)
    s.queue(record, "peer-c")
    await _settle(s, 5.0)
    assert s.wants == {} and [r.sequence_number for r in s.pulled] == [3]


def test_retry_delays_grow_are_capped_and_jittered() -> None:
    rng = random.Random(7)
    delays = [retry_delay(a, 0.5, rng=rng) for a in range(1, 12)]
    for attempt, d in enumerate(delays, start=1):
        full = min(MAX_RETRY_DELAY_S, 0.5 * 2 ** (attempt - 1))
        assert full / 2 <= d <= full
    assert max(delays) <= MAX_RETRY_DELAY_S
    spread = {round(retry_delay(10, 0.5, rng=rng), 3) for _ in range(20)}
    assert len(spread) > 10  # followers told busy together come back apart
    assert retry_delay(10_000, 0.5) <= MAX_RETRY_DELAY_S  # no overflow
