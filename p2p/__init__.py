"""odf-node p2p package."""
