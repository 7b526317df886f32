"""The node's HTTP API (aiohttp): routes, bearer-token and Origin/Host rules, attestation routes."""
