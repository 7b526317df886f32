"""Content routing and signed heads over a private Kademlia DHT (py-libp2p's `KadDHT`).

* `p2p.dht.protocol`: the swarm's own protocol id, ``/odf/kad/1.0.0`` (py-libp2p 0.8.1
  ignores its ``protocol_prefix``; the module sets the id it uses).
* `p2p.dht.keys`: a dataset's provider key and head-record key (pure).
* `p2p.dht.records`: the ``/odf-head/`` validator: verified records only, highest
  sequence number wins, same-sequence conflicts kept as evidence (`p2p.dht.evidence`).
* `p2p.dht.node`: `DhtNode`, the DHT of one trio run of a host: provide / find
  providers (re-provided on a schedule), put / quorum-read head records.
* `p2p.dht.settings`: `DhtSettings`.

The package uses p2p's transport-free core and py-libp2p, never `p2p.libp2p`:
`p2p.libp2p.stack` builds a `DhtNode` on the host it creates.
"""
