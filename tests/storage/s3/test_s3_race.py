"""Processes racing on one dataset in S3: no commit lost, one creator wins (small numbers).

The full numbers (8 writers x 20 commits, 16 creators) are ``scripts/bench/s3_race.py``.
"""

from __future__ import annotations

import pytest

from storage.s3.url import S3Location
from tests.storage.s3.race import run_commit_race, run_create_race


@pytest.mark.slow
def test_concurrent_commits_form_one_linear_chain(s3_location: S3Location) -> None:
    race = run_commit_race(s3_location.child("ds"), writers=4, commits=5)
    assert race.new_blocks == 20
    assert race.linear
    assert race.lost == 0
    assert race.attempts >= 20


@pytest.mark.slow
def test_concurrent_creates_have_one_winner(s3_location: S3Location) -> None:
    assert run_create_race(s3_location.child("ds"), creators=6) == 1
