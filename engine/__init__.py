"""odf-node engine package."""
