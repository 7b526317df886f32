"""The private protocol id of odf-node's Kademlia swarm, set in py-libp2p 0.8.1.

py-libp2p 0.8.1's `KadDHT` accepts a ``protocol_prefix`` but never uses it: the stream
handler and every outbound request (peer routing, providers, values, the routing
table's server-mode check) use the module constant ``PROTOCOL_ID`` (``/ipfs/kad/1.0.0``),
imported by name into each module. Swarms that share a protocol id merge when they
meet, so an odf node speaking the public IPFS id would join the Amino DHT, and Amino
peers would fill its routing table and refuse its ``/odf-head/`` records.

`use_odf_protocol` rebinds that constant to `ODF_KAD_PROTOCOL` in each module that
holds it. It is process-wide (every `KadDHT` of the process then speaks the odf id,
which is what an odf process wants), idempotent, and must run before a `KadDHT` is
built (its constructor registers the stream handler). `p2p.dht` calls it on import.
"""

from __future__ import annotations

import importlib
from typing import Final

from libp2p.custom_types import TProtocol

__all__ = ["AMINO_KAD_PROTOCOL", "ODF_KAD_PROTOCOL", "use_odf_protocol"]

#: The protocol id of odf-node's DHT swarm (the Kademlia wire format, another swarm).
ODF_KAD_PROTOCOL: Final = TProtocol("/odf/kad/1.0.0")
#: The public IPFS (Amino) id, which an odf node must neither speak nor answer.
AMINO_KAD_PROTOCOL: Final = TProtocol("/ipfs/kad/1.0.0")

#: The py-libp2p modules that bind ``PROTOCOL_ID`` at import (``routing_table`` reads
#: ``common.PROTOCOL_ID`` at call time, so ``common`` covers it).
_MODULES: Final = (
    "libp2p.kad_dht.common",
    "libp2p.kad_dht.kad_dht",
    "libp2p.kad_dht.peer_routing",
    "libp2p.kad_dht.provider_store",
    "libp2p.kad_dht.value_store",
)


def use_odf_protocol() -> None:
    """Make every py-libp2p Kademlia module of this process speak `ODF_KAD_PROTOCOL`.

    Raises:
        RuntimeError: a module no longer has ``PROTOCOL_ID`` (another py-libp2p
            version): better to stop than to join the public swarm silently.
    """
    for name in _MODULES:
        module = importlib.import_module(name)
        if not hasattr(module, "PROTOCOL_ID"):
            raise RuntimeError(f"{name} has no PROTOCOL_ID: cannot set the odf DHT protocol")
        setattr(module, "PROTOCOL_ID", ODF_KAD_PROTOCOL)  # noqa: B010 (a module global)
