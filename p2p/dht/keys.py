"""DHT keys of a dataset: pure functions of its ID.

* Provider records are keyed by ``multihash(sha2-256(did))``: the key py-libp2p's
  provider store and the Kademlia distance take as is (a sha2-256 multihash, as a CID's
  would be), and one that names no dataset to a peer that does not know the DID.
* The signed head record lives under ``/odf-head/<hex of sha2-256(did)[:20]>``: the
  namespace selects `p2p.dht.records.HeadRecordValidator` on every node, and the
  validator recomputes the key from the record's own DID, so a record can be stored
  only under its dataset's key. The key is `MAX_KEY_BYTES` long: py-libp2p servers
  ignore a FIND_NODE whose key is neither a multihash nor at most 50 bytes, and a
  lookup that cannot ask beyond its own neighbours stores and reads the record there
  only. 160 bits of the digest keep keys collision-free at any dataset count.

``did`` is the canonical ``did:odf:f<hex>`` form (`DatasetId.to_did_odf`): any multibase a
DID was written in gives the same keys.
"""

from __future__ import annotations

import hashlib
from typing import Final

from fbs.did import DatasetId

__all__ = ["HEAD_NAMESPACE", "MAX_KEY_BYTES", "head_key", "provider_key"]

#: Namespace of the signed head records in the DHT's value store.
HEAD_NAMESPACE: Final = "odf-head"
#: Longest non-multihash key a py-libp2p server takes in FIND_NODE.
MAX_KEY_BYTES: Final = 50
_HEAD_DIGEST_BYTES: Final = 20
_SHA2_256_PREFIX: Final = b"\x12\x20"


def _digest(dataset_id: DatasetId) -> bytes:
    return hashlib.sha256(dataset_id.to_did_odf().encode("ascii")).digest()


def provider_key(dataset_id: DatasetId) -> bytes:
    """The provider-record key of a dataset: a sha2-256 multihash of its DID (34 bytes)."""
    return _SHA2_256_PREFIX + _digest(dataset_id)


def head_key(dataset_id: DatasetId) -> str:
    """The value key of a dataset's signed head record (``/odf-head/<40 hex>``, 50 bytes)."""
    return f"/{HEAD_NAMESPACE}/{_digest(dataset_id)[:_HEAD_DIGEST_BYTES].hex()}"
