"""odf-node node package."""
