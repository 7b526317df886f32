"""odf-node p2p package: signed heads, verified sync and its transports.

Modules: `p2p.errors` (error tree), `p2p.head_record` (signed head records),
`p2p.head_store` (persistent high-water marks, equivocation evidence), `p2p.sync`
(transport-independent verified pull), `p2p.http.source` (HTTP transport and push);
the libp2p transport lives next to them (`p2p.libp2p.host` and friends).
"""
