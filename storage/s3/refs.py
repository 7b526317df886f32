"""`S3RefStore`: the `RefStore` seam on S3, compare-and-swap by conditional ``PUT``.

A ref is the key ``<prefix>/<name>`` (kamu: ``refs/head``) holding the canonical
multibase hash, no newline. `set_if_equals` reads the value with its ETag, compares
it with the expected value, then writes with ``If-Match: <that ETag>`` (or
``If-None-Match: *`` when the ref must not exist yet): if another writer moved the
ref between the read and the write, S3 refuses the write (412) and the swap fails
with `RefCASFailed`; no lock service is involved. This holds only on a store that
honours conditional writes: `storage.s3.probe` refuses the others.
"""

from __future__ import annotations

from fbs.errors import InvalidHash
from fbs.multiformats import Multihash
from storage.errors import InvalidRef, ObjectTooLarge, RefCASFailed, RefNotFound
from storage.refs import MAX_REF_FILE_SIZE, MAX_REF_NAME_LEN, REF_NAME_RE, encode_ref, parse_ref
from storage.refs import validate_ref_name as _valid
from storage.s3.client import S3Client


def _require_hash(value: object, what: str) -> Multihash:
    if not isinstance(value, Multihash):
        raise InvalidHash(f"{what} must be a Multihash, got {type(value).__name__}")
    return value


class S3RefStore:
    """Refs as S3 keys ``<prefix>/<name>`` (see the module docstring).

    Args:
        client: the bucket's client.
        prefix: the key prefix of the refs, e.g. ``repo/ds/refs``.
    """

    def __init__(self, client: S3Client, prefix: str) -> None:
        self._client = client
        self.prefix = prefix.strip("/")

    def __repr__(self) -> str:
        return f"S3RefStore({self._client.bucket!r}, {self.prefix!r})"

    def key_of(self, name: str) -> str:
        """The key of ref ``name``.

        Raises:
            InvalidRefName: for a bad name.
        """
        return f"{self.prefix}/{_valid(name)}"

    def read(self, name: str) -> tuple[Multihash | None, str | None]:
        """The ref's value and ETag (``(None, None)`` when it does not exist).

        Raises:
            InvalidRefName: for a bad name.
            InvalidRef: the stored value is not a canonical hash.
        """
        key = self.key_of(name)
        try:
            got = self._client.get(key, MAX_REF_FILE_SIZE)
        except ObjectTooLarge:
            raise InvalidRef(f"ref {name!r} is larger than {MAX_REF_FILE_SIZE} bytes") from None
        if got is None:
            return None, None
        return parse_ref(got[0]), got[1]

    def get(self, name: str) -> Multihash:
        value = self.get_or_none(name)
        if value is None:
            raise RefNotFound(f"ref {name!r} does not exist")
        return value

    def get_or_none(self, name: str) -> Multihash | None:
        return self.read(name)[0]

    def set_if_equals(self, name: str, old: Multihash | None, new: Multihash) -> None:
        key = self.key_of(name)
        _require_hash(new, "new ref value")
        if old is not None:
            _require_hash(old, "expected ref value")
        current, etag = self.read(name)
        if current != old:
            raise RefCASFailed(f"ref {name!r} is {current}, expected {old}")
        if current == new:
            return
        data = encode_ref(new)
        if etag is None:
            swapped = self._client.put_if_absent(key, data)
        else:
            swapped = self._client.put_if_match(key, data, etag)
        if not swapped:
            raise RefCASFailed(f"ref {name!r} moved from {old} while it was being set")

    def delete_if_equals(self, name: str, old: Multihash) -> None:
        key = self.key_of(name)
        _require_hash(old, "expected ref value")
        current, etag = self.read(name)
        if current != old or etag is None:
            raise RefCASFailed(f"ref {name!r} is {current}, expected {old}")
        if not self._client.delete(key, etag=etag):
            raise RefCASFailed(f"ref {name!r} moved from {old} while it was being deleted")

    def names(self) -> list[str]:
        start = len(self.prefix) + 1
        found = (key[start:] for key, _ in self._client.list_keys(self.prefix + "/"))
        return sorted(n for n in found if len(n) <= MAX_REF_NAME_LEN and REF_NAME_RE.fullmatch(n))
