"""Content-addressed object store, refs with compare-and-swap, dataset layout, chain validation."""
