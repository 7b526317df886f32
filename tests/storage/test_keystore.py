"""Key store: private permissions, durable writes, refusal of unsafe or foreign keys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from storage.errors import KeyStoreError
from storage.faults import RecordingOps
from storage.keystore import KeyStore


def test_save_load_roundtrip_with_modes(tmp_path: Path) -> None:
    ks = KeyStore(tmp_path / "keys")
    key = KeyPair.generate()
    path = ks.save(key)
    assert os.stat(tmp_path / "keys").st_mode & 0o777 == 0o700
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ks.load(key.dataset_id).private_bytes() == key.private_bytes()
    assert ks.has(key.dataset_id)
    assert ks.list() == [key.dataset_id]
    assert ks.save(key) == path  # idempotent


def test_save_is_durable(tmp_path: Path) -> None:
    ops = RecordingOps()
    KeyStore(tmp_path / "keys", ops=ops).save(KeyPair.generate())
    kinds = [k for k, _ in ops.trace]
    assert kinds.index("fsync") < kinds.index("replace") < len(kinds) - 1
    assert kinds[-1] == "fsync_dir"


def test_refuses_loose_file_and_dir(tmp_path: Path) -> None:
    ks = KeyStore(tmp_path / "keys")
    key = KeyPair.generate()
    path = ks.save(key)
    os.chmod(path, 0o644)
    with pytest.raises(KeyStoreError, match="mode"):
        ks.load(key.dataset_id)
    os.chmod(path, 0o600)
    os.chmod(tmp_path / "keys", 0o755)
    with pytest.raises(KeyStoreError, match="mode"):
        ks.load(key.dataset_id)
    with pytest.raises(KeyStoreError):
        ks.save(KeyPair.generate())
    os.chmod(tmp_path / "keys", 0o700)
    assert ks.load(key.dataset_id).dataset_id == key.dataset_id


def test_refuses_symlink_swapped_and_damaged(tmp_path: Path) -> None:
    ks = KeyStore(tmp_path / "keys")
    a, b = KeyPair.generate(), KeyPair.generate()
    pa, pb = ks.save(a), ks.save(b)
    # Swapped content: the key does not belong to the DID it is filed under.
    data_a = pa.read_bytes()
    os.chmod(pb, 0o600)
    pb.write_bytes(data_a)
    with pytest.raises(KeyStoreError, match="does not hold"):
        ks.load(b.dataset_id)
    pb.write_bytes(b"odf-node-ed25519-seed-v1\nzz\n")
    with pytest.raises(KeyStoreError, match="damaged"):
        ks.load(b.dataset_id)
    pb.write_bytes(b"x" * 1000)
    with pytest.raises(KeyStoreError):
        ks.load(b.dataset_id)
    pb.unlink()
    os.symlink(pa, pb)
    with pytest.raises(KeyStoreError, match="regular"):
        ks.load(b.dataset_id)


def test_missing_and_hostile(tmp_path: Path) -> None:
    ks = KeyStore(tmp_path / "keys")
    ks.save(KeyPair.generate())
    with pytest.raises(KeyStoreError, match="no key"):
        ks.load(DatasetId.new_seeded(b"nobody"))
    with pytest.raises(KeyStoreError):
        ks.load("../../etc/passwd")  # type: ignore[arg-type]
    with pytest.raises(KeyStoreError):
        ks.save("key")  # type: ignore[arg-type]
    (tmp_path / "keys" / "junk.key").write_bytes(b"")
    assert len(ks.list()) == 1


def test_retire_keeps_key(tmp_path: Path) -> None:
    ks = KeyStore(tmp_path / "keys")
    key = KeyPair.generate()
    ks.save(key)
    dst = ks.retire(key.dataset_id)
    assert dst is not None and dst.parent.name == "deleted"
    assert not ks.has(key.dataset_id)
    assert os.stat(dst.parent).st_mode & 0o777 == 0o700
    assert [k.dataset_id for k in ks.load_retired(key.dataset_id)] == [key.dataset_id]
    assert ks.retire(key.dataset_id) is None
