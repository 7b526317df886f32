"""Configuration of the node daemon (`node.daemon.service`): a YAML file plus CLI overrides.

File format (every key optional; unknown keys are refused so typos do not pass
silently)::

    listen: ["/ip4/127.0.0.1/tcp/4001"]     # libp2p listen multiaddrs
    bootstrap: ["/ip4/10.0.0.2/tcp/4001/p2p/12D3Koo..."]
    mdns: false                              # LAN discovery (binds every interface)
    http:
      host: 127.0.0.1                        # bind address (writes need the token anyway)
      port: 8080                             # 0 picks a free port
      allowed_hosts: [node1.example.org]     # names accepted in Host besides IPs and
                                             # localhost (DNS-rebinding check; "*": any)
    follow: ["my.dataset", "did:odf:fed01..."]   # or ["all"]
    allow_ingest: true                       # push ingest over HTTP (bearer token)
    allow_push: true                         # signed pushes over HTTP (bearer token)
    log_level: info                          # debug | info | warning | error
    log_format: auto                         # auto (text on a terminal, else json) | json | text
    head_poll_interval_s: 1.0                # how often owned heads are checked
    reannounce_interval_s: 30.0              # how often held heads are gossiped again
    validator: false                         # check replicated data, gossip attestations
    validator_batch_blocks: 16               # blocks checked per run before other datasets
    engine: 127.0.0.1:50051                  # engine for replays (default: engine manager)
    refuse_disputed: false                   # refuse new heads of publishers with
                                             # confirmed divergence or equivocation
    dispute_confirmations: 1                 # validators that confirm a divergence
    ban_duration_s: 600                      # how long a misbehaving peer is refused
    gossip_rate_per_peer: 20                 # gossip messages/s one peer may send us
    gossip_burst_per_peer: 50                # ... and in a burst (over it: dropped unread)
    dht: true                                # content routing over odf's Kademlia DHT
    dht_lookup_interval_s: 60.0              # how often followed datasets are looked up

Content routing (``dht``, on by default; ``odf node run --no-dht`` turns it off): the
node joins odf's private Kademlia swarm (`p2p.dht`), announces itself as a provider of
every dataset it holds, stores their signed head records, and finds the holders of a
followed or pulled dataset that no connected peer holds (`node.daemon.routing`). On by
default because what it costs, measured on this project's 2-core machine
(`scripts/bench/dht_daemon.py`, five idle daemons in a line, load 10-16), is within the
noise of the daemon's own cost: 0.20 / 0.21 CPU-s per minute per node with it against
0.19 / 0.21 without, the same resident memory (159 MiB), while the last node of the line
had a dataset followed by DID in 1.5-1.7 s. Its routing table is also refreshed every
10 minutes: about 2 CPU-s per refresh per host at 100 hosts (`scripts/devnet-scale`),
i.e. some 0.2 CPU-s per minute more at that size, and less in smaller swarms. Without
it a node reaches only the datasets its own peers hold. Turn it off for a node that
should talk to its bootstrap peers only.

Every state-changing HTTP request needs ``Authorization: Bearer <token>``: the token is
created at the first ``odf node run`` in ``.odf/p2p/http-token`` (mode 0600); see
`node.http.auth`.

`load_config` reads a file, `NodeConfig.with_overrides` applies command-line values.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from node.errors import UsageError
from p2p.peers import (
    DEFAULT_BAN_DURATION_S,
    DEFAULT_GOSSIP_BURST_PER_PEER,
    DEFAULT_GOSSIP_RATE_PER_PEER,
)

__all__ = [
    "DEFAULT_DHT_LOOKUP_INTERVAL_S",
    "DEFAULT_HTTP_HOST",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_LISTEN",
    "FOLLOW_ALL",
    "MAX_CONFIG_BYTES",
    "NodeConfig",
    "load_config",
    "parse_config",
]

#: libp2p listen addresses when none are configured (loopback, fixed-less port).
DEFAULT_LISTEN: Final = ("/ip4/127.0.0.1/tcp/0",)
#: HTTP API bind address: loopback (writes need the token; reads are public data).
DEFAULT_HTTP_HOST: Final = "127.0.0.1"
DEFAULT_HTTP_PORT: Final = 8080
#: The follow-list entry meaning "replicate every dataset announced".
FOLLOW_ALL: Final = "all"
#: Largest config file read.
MAX_CONFIG_BYTES: Final = 1 << 20
#: Accepted log levels and formats.
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LOG_FORMATS: Final = ("auto", "json", "text")
#: Bounds of the periodic intervals (seconds).
MIN_INTERVAL_S: Final = 0.05
MAX_INTERVAL_S: Final = 3600.0
#: Longest wait between DHT lookups of a followed dataset nobody connected serves.
DEFAULT_DHT_LOOKUP_INTERVAL_S: Final = 60.0
_ADDRESS_RE: Final = re.compile(r"[A-Za-z0-9.\-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything `node.daemon.service.NodeDaemon` needs besides the workspace.

    Attributes:
        listen: libp2p listen multiaddrs.
        bootstrap: peer multiaddrs (with ``/p2p/<peer id>``) dialled at start.
        mdns: enable mDNS discovery.
        http_host / http_port: where the HTTP API listens (port 0: any free port).
        http_allowed_hosts: host names accepted in the ``Host`` header besides IP
            literals, ``localhost`` and ``http_host`` (``"*"``: any; `node.http.auth`).
        follow: datasets (aliases or DIDs) replicated as heads are announced;
            ``("all",)`` replicates everything announced.
        allow_ingest: accept push ingest over HTTP (with the bearer token).
        allow_push: accept signed pushes over HTTP (with the bearer token).
        log_level / log_format: logging (see `node.daemon.service.setup_logging`).
        head_poll_interval_s: period of the head watcher.
        reannounce_interval_s: period of re-gossiping held heads (late joiners).
        pull_attempts: fast tries per pull; later retries wait the longest backoff
            (a pull is never dropped while its head is the newest wanted).
        pull_retry_delay_s: first retry delay (doubled each try, capped at 30 s).
        validator: run a validator: replicate followed derivatives with their inputs,
            check every new block (`node.validation.validator`), gossip signed attestations.
        validator_batch_blocks: blocks one validation run checks before other datasets
            get a turn.
        engine_address: ``host:port`` of the engine for replays (default:
            `node.engine_manager.get_engine`).
        refuse_disputed: stop replicating new heads of datasets whose publisher has
            confirmed divergence or equivocation evidence (`node.validation.disputes`).
        dispute_confirmations: distinct validators whose ``diverged`` confirm a
            divergence (this node's own validator confirms alone).
        ban_duration_s: how long a peer whose score fell to the threshold is
            disconnected and refused (`p2p.peers`).
        gossip_rate_per_peer / gossip_burst_per_peer: the per-forwarder gossip token
            bucket (`p2p.libp2p.pubsub_guard.GossipRateLimiter`).
        dht: run content routing over odf's DHT (see the module docstring).
        dht_lookup_interval_s: the longest wait between two DHT lookups of a followed
            dataset nobody connected serves (the first ones come sooner).
    """

    listen: tuple[str, ...] = DEFAULT_LISTEN
    bootstrap: tuple[str, ...] = ()
    mdns: bool = False
    http_host: str = DEFAULT_HTTP_HOST
    http_port: int = DEFAULT_HTTP_PORT
    http_allowed_hosts: tuple[str, ...] = ()
    follow: tuple[str, ...] = ()
    allow_ingest: bool = True
    allow_push: bool = True
    log_level: str = "info"
    log_format: str = "auto"
    head_poll_interval_s: float = 1.0
    reannounce_interval_s: float = 30.0
    pull_attempts: int = 5
    pull_retry_delay_s: float = 0.5
    validator: bool = False
    validator_batch_blocks: int = 16
    engine_address: str | None = None
    refuse_disputed: bool = False
    dispute_confirmations: int = 1
    ban_duration_s: float = DEFAULT_BAN_DURATION_S
    gossip_rate_per_peer: float = DEFAULT_GOSSIP_RATE_PER_PEER
    gossip_burst_per_peer: int = DEFAULT_GOSSIP_BURST_PER_PEER
    dht: bool = True
    dht_lookup_interval_s: float = DEFAULT_DHT_LOOKUP_INTERVAL_S

    def __post_init__(self) -> None:
        _check(self)

    @property
    def follow_all(self) -> bool:
        """Whether every announced dataset is replicated."""
        return FOLLOW_ALL in self.follow

    def with_overrides(self, **values: Any) -> NodeConfig:
        """A copy with the given fields replaced (``None`` values are ignored).

        Raises:
            UsageError: an unknown field or an invalid value.
        """
        names = {f.name for f in dataclasses.fields(self)}
        changes = {k: v for k, v in values.items() if v is not None}
        unknown = set(changes) - names
        if unknown:
            raise UsageError(f"unknown node settings: {', '.join(sorted(unknown))}")
        for key in ("listen", "bootstrap", "follow", "http_allowed_hosts"):
            if key in changes:
                changes[key] = tuple(changes[key])
        return dataclasses.replace(self, **changes)


def _check(cfg: NodeConfig) -> None:
    for name in ("listen", "bootstrap", "follow", "http_allowed_hosts"):
        value = getattr(cfg, name)
        if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
            raise UsageError(f"node setting {name!r} must be a list of non-empty strings")
    if not cfg.listen:
        raise UsageError("node setting 'listen' needs at least one address")
    if not isinstance(cfg.http_port, int) or not 0 <= cfg.http_port <= 65535:
        raise UsageError(f"invalid HTTP port {cfg.http_port!r}")
    if not isinstance(cfg.http_host, str) or not cfg.http_host:
        raise UsageError("node setting 'http.host' must be a non-empty string")
    if cfg.log_level not in LOG_LEVELS:
        raise UsageError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
    if cfg.log_format not in LOG_FORMATS:
        raise UsageError(f"log_format must be one of {', '.join(LOG_FORMATS)}")
    for name in (
        "head_poll_interval_s",
        "reannounce_interval_s",
        "pull_retry_delay_s",
        "dht_lookup_interval_s",
    ):
        value = getattr(cfg, name)
        if not isinstance(value, int | float) or not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
            raise UsageError(f"{name} must be between {MIN_INTERVAL_S} and {MAX_INTERVAL_S}")
    if not isinstance(cfg.pull_attempts, int) or not 1 <= cfg.pull_attempts <= 100:
        raise UsageError("pull_attempts must be between 1 and 100")
    for name in ("mdns", "allow_ingest", "allow_push", "validator", "refuse_disputed", "dht"):
        if not isinstance(getattr(cfg, name), bool):
            raise UsageError(f"node setting {name!r} must be true or false")
    _check_peer_limits(cfg)
    for name, hi in (("validator_batch_blocks", 100_000), ("dispute_confirmations", 1_000)):
        value = getattr(cfg, name)
        if type(value) is not int or not 1 <= value <= hi:
            raise UsageError(f"{name} must be an integer between 1 and {hi}")
    if cfg.engine_address is not None and (
        not isinstance(cfg.engine_address, str) or not _ADDRESS_RE.fullmatch(cfg.engine_address)
    ):
        raise UsageError(f"engine address must be host:port, got {cfg.engine_address!r}")


def _check_peer_limits(cfg: NodeConfig) -> None:
    for name, lo, hi in (("ban_duration_s", 1.0, 7 * 86400.0), ("gossip_rate_per_peer", 0.1, 1e5)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
            raise UsageError(f"{name} must be a number between {lo} and {hi:g}")
    burst = cfg.gossip_burst_per_peer
    if type(burst) is not int or not 1 <= burst <= 100_000:
        raise UsageError("gossip_burst_per_peer must be an integer between 1 and 100000")


_SCALARS: Final = (
    "ban_duration_s",
    "gossip_rate_per_peer",
    "gossip_burst_per_peer",
    "validator",
    "validator_batch_blocks",
    "refuse_disputed",
    "dispute_confirmations",
    "mdns",
    "allow_ingest",
    "allow_push",
    "log_level",
    "log_format",
    "head_poll_interval_s",
    "reannounce_interval_s",
    "pull_attempts",
    "pull_retry_delay_s",
    "dht",
    "dht_lookup_interval_s",
)


def parse_config(doc: object) -> NodeConfig:
    """Build a `NodeConfig` from a parsed YAML document (see the module docstring).

    Raises:
        UsageError: not a mapping, unknown keys, or invalid values.
    """
    if doc is None:
        return NodeConfig()
    if not isinstance(doc, dict):
        raise UsageError("a node config file must be a YAML mapping")
    values: dict[str, Any] = {}
    for key, value in doc.items():
        if key in ("listen", "bootstrap", "follow"):
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list):
                raise UsageError(f"node setting {key!r} must be a list")
            values[key] = tuple(value)
        elif key == "http":
            if not isinstance(value, dict):
                raise UsageError("node setting 'http' must be a mapping with host/port")
            for sub, v in value.items():
                if sub not in ("host", "port", "allowed_hosts"):
                    raise UsageError(f"unknown node setting 'http.{sub}'")
                if sub == "allowed_hosts":
                    if isinstance(v, str):
                        v = [v]
                    if not isinstance(v, list):
                        raise UsageError("node setting 'http.allowed_hosts' must be a list")
                    v = tuple(v)
                values[f"http_{sub}"] = v
        elif key in _SCALARS:
            values[key] = value
        elif key == "engine":
            values["engine_address"] = value
        else:
            raise UsageError(f"unknown node setting {key!r}")
    return NodeConfig(**values)


def load_config(path: Path) -> NodeConfig:
    """Read a YAML config file.

    Raises:
        UsageError: unreadable, too large, not YAML, or invalid settings.
    """
    import yaml

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise UsageError(f"cannot read node config {path}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(f"node config {path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise UsageError(f"node config {path} is not valid YAML: {e}") from None
    return parse_config(doc)
