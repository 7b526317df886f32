"""Rendering for people: tables/JSON/YAML, CSV cells, one-line event summaries."""
