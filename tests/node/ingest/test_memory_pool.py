"""The ingest process's Arrow memory pool (jemalloc unless the user chose one)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from node.ingest.memory import INGEST_MEMORY_POOL, POOL_ENV

PROBE = (
    "import pyarrow as pa\n"
    "from node.ingest.memory import use_ingest_memory_pool\n"
    "before = pa.default_memory_pool().backend_name\n"
    "print(before, use_ingest_memory_pool(), pa.default_memory_pool().backend_name)\n"
)


def probe(env: dict[str, str]) -> list[str]:
    """Run the switch in a fresh process (the test process keeps its pool)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.mark.skipif(not has_jemalloc(), reason="this pyarrow has no jemalloc")
def test_ingest_processes_allocate_from_jemalloc() -> None:
    env = {k: v for k, v in os.environ.items() if k != POOL_ENV}
    before, returned, after = probe(env)
    assert before != INGEST_MEMORY_POOL  # the switch is what changes it
    assert returned == after == INGEST_MEMORY_POOL


def test_a_pool_the_user_chose_is_kept() -> None:
    before, returned, after = probe({**os.environ, POOL_ENV: "system"})
    assert before == returned == after == "system"
