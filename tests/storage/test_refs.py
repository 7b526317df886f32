"""Ref store contract tests (disk and memory), strict parsing, and cross-process CAS."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
from pathlib import Path

import pytest

from fbs.errors import InvalidHash
from fbs.multiformats import Multihash
from storage.errors import (
    InvalidRef,
    InvalidRefName,
    RefCASFailed,
    RefError,
    RefLockTimeout,
    RefNotFound,
)
from storage.refs import HEAD, DiskRefStore, MemoryRefStore, RefStore, encode_ref, parse_ref

A = Multihash.sha3_256(b"a")
B = Multihash.sha3_256(b"b")
C = Multihash.sha3_256(b"c")

# -- contract ---------------------------------------------------------------------------


def test_protocol_conformance(ref_store: RefStore) -> None:
    assert isinstance(ref_store, RefStore)


def test_missing_ref(ref_store: RefStore) -> None:
    with pytest.raises(RefNotFound):
        ref_store.get(HEAD)
    assert ref_store.get_or_none(HEAD) is None
    assert ref_store.names() == []


def test_create_update_delete(ref_store: RefStore) -> None:
    ref_store.set_if_equals(HEAD, None, A)
    assert ref_store.get(HEAD) == A
    ref_store.set_if_equals(HEAD, A, B)
    assert ref_store.get(HEAD) == B
    assert ref_store.names() == [HEAD]
    ref_store.delete_if_equals(HEAD, B)
    assert ref_store.get_or_none(HEAD) is None
    ref_store.set_if_equals(HEAD, None, C)  # can be created again
    assert ref_store.get(HEAD) == C


def test_cas_create_fails_if_exists(ref_store: RefStore) -> None:
    ref_store.set_if_equals(HEAD, None, A)
    with pytest.raises(RefCASFailed):
        ref_store.set_if_equals(HEAD, None, B)
    assert ref_store.get(HEAD) == A


def test_cas_update_fails_on_stale_old(ref_store: RefStore) -> None:
    ref_store.set_if_equals(HEAD, None, A)
    ref_store.set_if_equals(HEAD, A, B)
    with pytest.raises(RefCASFailed) as e:
        ref_store.set_if_equals(HEAD, A, C)
    assert str(B) in str(e.value)
    assert ref_store.get(HEAD) == B


def test_cas_update_of_missing_ref_fails(ref_store: RefStore) -> None:
    with pytest.raises(RefCASFailed):
        ref_store.set_if_equals(HEAD, A, B)
    assert ref_store.get_or_none(HEAD) is None


def test_set_to_same_value(ref_store: RefStore) -> None:
    ref_store.set_if_equals(HEAD, None, A)
    ref_store.set_if_equals(HEAD, A, A)
    assert ref_store.get(HEAD) == A


def test_delete_if_equals_checks_value(ref_store: RefStore) -> None:
    with pytest.raises(RefCASFailed):
        ref_store.delete_if_equals(HEAD, A)
    ref_store.set_if_equals(HEAD, None, A)
    with pytest.raises(RefCASFailed):
        ref_store.delete_if_equals(HEAD, B)
    assert ref_store.get(HEAD) == A


def test_several_names(ref_store: RefStore) -> None:
    ref_store.set_if_equals("head", None, A)
    ref_store.set_if_equals("high-water-1", None, B)
    assert ref_store.names() == ["head", "high-water-1"]
    assert ref_store.get("high-water-1") == B


@pytest.mark.parametrize(
    "name",
    ["", "HEAD", "../head", "refs/head", ".head", "-head", "head\n", "head ", "a" * 65, "hé", 7],
)
def test_invalid_ref_names(ref_store: RefStore, name: object) -> None:
    with pytest.raises(InvalidRefName):
        ref_store.get(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidRefName):
        ref_store.set_if_equals(name, None, A)  # type: ignore[arg-type]
    with pytest.raises(InvalidRefName):
        ref_store.delete_if_equals(name, A)  # type: ignore[arg-type]
    assert ref_store.names() == []


def test_values_must_be_multihash(ref_store: RefStore) -> None:
    with pytest.raises(InvalidHash):
        ref_store.set_if_equals(HEAD, None, A.to_multibase())  # type: ignore[arg-type]
    with pytest.raises(InvalidHash):
        ref_store.set_if_equals(HEAD, A.to_multibase(), B)  # type: ignore[arg-type]
    assert ref_store.get_or_none(HEAD) is None


def test_two_stale_handles(tmp_path: Path) -> None:
    """Two handles on one directory: the second writer with a stale view loses."""
    first, second = DiskRefStore(tmp_path), DiskRefStore(tmp_path)
    first.set_if_equals(HEAD, None, A)
    seen = second.get(HEAD)
    first.set_if_equals(HEAD, A, B)
    with pytest.raises(RefCASFailed):
        second.set_if_equals(HEAD, seen, C)
    assert second.get(HEAD) == B


# -- disk format --------------------------------------------------------------------------


def test_disk_file_is_multibase_without_newline(tmp_path: Path) -> None:
    store = DiskRefStore(tmp_path / "refs")
    store.set_if_equals(HEAD, None, A)
    assert (tmp_path / "refs" / "head").read_bytes() == A.to_multibase().encode()
    assert encode_ref(A) == A.to_multibase().encode()


def test_disk_reads_kamu_written_head(tmp_path: Path) -> None:
    (tmp_path / "head").write_text(A.to_multibase())
    assert DiskRefStore(tmp_path).get(HEAD) == A


@pytest.mark.parametrize(
    "content",
    [
        A.to_multibase().encode() + b"\n",
        b" " + A.to_multibase().encode(),
        A.to_multibase().upper().encode(),
        b"",
        b"garbage",
        A.to_multibase().encode()[:-2],
        b"\xff\xfe",
        b"f" * 300,
    ],
)
def test_disk_strict_parsing(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "head").write_bytes(content)
    store = DiskRefStore(tmp_path)
    with pytest.raises(InvalidRef):
        store.get(HEAD)
    with pytest.raises(InvalidRef):
        parse_ref(content)
    # A CAS cannot compare against garbage either; it refuses rather than guess.
    with pytest.raises(InvalidRef):
        store.set_if_equals(HEAD, None, B)
    assert (tmp_path / "head").read_bytes() == content


def test_disk_ref_symlink_refused(tmp_path: Path) -> None:
    (tmp_path / "target").write_text(A.to_multibase())
    (tmp_path / "head").symlink_to(tmp_path / "target")
    with pytest.raises(InvalidRef):
        DiskRefStore(tmp_path).get(HEAD)


def test_disk_names_ignore_locks_and_temp(tmp_path: Path) -> None:
    store = DiskRefStore(tmp_path)
    store.set_if_equals(HEAD, None, A)
    (tmp_path / ".pending-abcdefghijklmnop").write_text("x")
    (tmp_path / "UPPER").write_text("x")
    (tmp_path / "sub").mkdir()
    assert (tmp_path / ".head.lock").exists()
    assert store.names() == [HEAD]


def test_disk_lock_timeout(tmp_path: Path) -> None:
    store = DiskRefStore(tmp_path, lock_timeout_s=0.0)
    store.set_if_equals(HEAD, None, A)
    fd = os.open(tmp_path / ".head.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(RefLockTimeout):
            store.set_if_equals(HEAD, A, B)
        assert store.get(HEAD) == A  # readers take no lock
    finally:
        os.close(fd)
    store.set_if_equals(HEAD, A, B)
    assert store.get(HEAD) == B


def test_errors_are_ref_errors(ref_store: RefStore) -> None:
    for call in (lambda: ref_store.get(HEAD), lambda: ref_store.set_if_equals(HEAD, A, B)):
        with pytest.raises(RefError):
            call()


# -- cross-process CAS race -----------------------------------------------------------------

WORKERS = 4
INCREMENTS = 50
COUNTER = [Multihash.sha3_256(str(i).encode()) for i in range(WORKERS * INCREMENTS + 1)]
INDEX = {h: i for i, h in enumerate(COUNTER)}


def _increment_worker(refs_dir: str) -> list[int]:
    """Increment the counter ref INCREMENTS times; return the values it moved from."""
    store = DiskRefStore(Path(refs_dir))
    won: list[int] = []
    while len(won) < INCREMENTS:
        current = store.get(HEAD)
        i = INDEX[current]
        try:
            store.set_if_equals(HEAD, current, COUNTER[i + 1])
        except RefCASFailed:
            continue
        won.append(i)
    return won


def test_multiprocess_cas_has_no_lost_updates(tmp_path: Path) -> None:
    store = DiskRefStore(tmp_path / "refs")
    store.set_if_equals(HEAD, None, COUNTER[0])
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(WORKERS) as pool:
        results = pool.map(_increment_worker, [str(tmp_path / "refs")] * WORKERS)
    assert store.get(HEAD) == COUNTER[-1]
    moved_from = sorted(i for won in results for i in won)
    # Every step 0 -> 1 -> ... -> N was won by exactly one process.
    assert moved_from == list(range(WORKERS * INCREMENTS))
    assert sorted(os.listdir(tmp_path / "refs")) == [".head.lock", "head"]


def test_memory_store_threads_no_lost_updates() -> None:
    import threading

    store = MemoryRefStore()
    store.set_if_equals(HEAD, None, COUNTER[0])
    wins: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        done = 0
        while done < INCREMENTS:
            current = store.get(HEAD)
            try:
                store.set_if_equals(HEAD, current, COUNTER[INDEX[current] + 1])
            except RefCASFailed:
                continue
            with lock:
                wins.append(INDEX[current])
            done += 1

    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get(HEAD) == COUNTER[-1]
    assert sorted(wins) == list(range(WORKERS * INCREMENTS))
