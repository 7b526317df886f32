"""What a node or dataset URL says: whether it reaches the workspace's own node, and the
dataset URL a kamu repository URL stands for."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_own_node", "smart_dataset_url"]


def _loopback(host: str) -> bool:
    if host in ("localhost", "0.0.0.0", "::") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_own_node(node_url: str, url: str) -> bool:
    """Whether ``url`` reaches the node whose HTTP API is ``node_url`` (same port, same
    host or both loopback; a node bound to 0.0.0.0 is reached on loopback)."""
    a, b = urlsplit(node_url), urlsplit(url)
    try:
        same_port = (a.port or 80) == (b.port or 80)
    except ValueError:
        return False
    ha, hb = (a.hostname or "").lower(), (b.hostname or "").lower()
    return a.scheme == b.scheme and same_port and (ha == hb or (_loopback(ha) and _loopback(hb)))


def smart_dataset_url(url: str, alias: str) -> str:
    """A kamu repository URL as a dataset URL: ``alias`` is appended when it names no dataset."""
    if urlsplit(url).path.strip("/"):
        return url
    return url.rstrip("/") + "/" + alias
