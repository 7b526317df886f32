"""``odf node``: run the peer-to-peer node daemon and talk to the running one.

- ``odf node run [--config FILE] [--listen ADDR ...] [--http-port P] [--bootstrap ADDR ...]
  [--mdns] [--follow DS|all ...] [--validator] [--engine HOST:PORT] [--refuse-disputed]
  [--no-dht]``:
  serve the workspace until SIGTERM/Ctrl-C (see `node.daemon.service`). Command-line values
  override the config file. ``--http-allow-host NAME`` accepts NAME in the HTTP ``Host``
  header (IPs and localhost always are; `node.http.auth`). ``--validator`` checks
  every replicated block (replaying derivative transforms on the engine) and gossips
  signed attestations. ``--no-dht`` turns content routing off (the node then reaches
  only what its peers hold; `node.daemon.config`). Logs are text on a terminal, JSON
  lines otherwise (``--log-format json|text`` forces one; `node.daemon.log`).
- ``odf node status`` / ``odf node peers``: ask the running node (found through
  ``.odf/run/node.json``) over its HTTP API (with the bearer token of
  ``.odf/p2p/http-token``, created at the first ``odf node run``); datasets are named
  by alias; ``-o json`` (or ``--json``) prints the API's JSON, where they are DIDs.
  The status shows the validator's backlog and the datasets with evidence against
  their publisher (disputed heads, equivocation), and which of them policy refuses;
  both show the DHT routing table (its size; the peers in it) and the providers the
  node's lookups found (JSON: ``dht`` in the status, ``inRoutingTable`` and
  ``provides`` in every peer row).
- ``odf node follow DS``: replicate DS as heads are announced: the running node is told
  over HTTP (persisted); without a running node, a foreground node follows DS. Warns
  when DS is disputed (`node.validation.disputes.disputed_warning`).
- ``odf node unfollow DS``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from node.cli_util import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    err,
    open_workspace,
    workspace_root,
)

if TYPE_CHECKING:
    from pathlib import Path

    from node.daemon.config import NodeConfig
    from node.runfile import RunInfo
    from storage.workspace import Workspace

__all__ = ["register"]

#: Timeout of requests to the running node (seconds).
API_TIMEOUT_S = 30.0


def _config(args: argparse.Namespace) -> NodeConfig:
    from pathlib import Path

    from node.daemon.config import NodeConfig, load_config

    base = load_config(Path(args.config)) if args.config else NodeConfig()
    follow = list(base.follow) + [f for f in (args.follow or []) if f not in base.follow]
    return base.with_overrides(
        listen=args.listen or None,
        bootstrap=(list(base.bootstrap) + args.bootstrap) if args.bootstrap else None,
        mdns=True if args.mdns else None,
        http_host=args.http_host,
        http_port=args.http_port,
        http_allowed_hosts=(
            list(base.http_allowed_hosts) + args.http_allow_host if args.http_allow_host else None
        ),
        follow=follow,
        allow_ingest=False if args.no_ingest else None,
        validator=True if args.validator else None,
        engine_address=args.engine,
        refuse_disputed=True if args.refuse_disputed else None,
        dht=args.dht,
        log_level=args.log_level,
        log_format=args.log_format,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from node.daemon.service import NodeDaemon, run_daemon

    ws = open_workspace(args)
    config = _config(args)

    def ready(daemon: NodeDaemon) -> None:
        if not args.quiet:
            sys.stderr.write(
                f"odf node {daemon.host.peer_id}\n"
                f"  libp2p: {' '.join(daemon.host.addrs)}\n"
                f"  http:   {daemon.http_url}\n"
            )
            if daemon.worker is not None:
                vid = daemon.worker.validator.validator_id.to_did_key()
                sys.stderr.write(f"  validator: {vid}\n")
            sys.stderr.flush()

    run_daemon(ws, config, ready=ready)
    return EXIT_OK


def _running(root: Path) -> RunInfo | None:
    """The node running for the workspace ``root`` (its ``.odf`` directory), if any."""
    from node.runfile import run_info_at

    return run_info_at(root)


def _api(
    root: Path,
    info: RunInfo,
    path: str,
    body: dict[str, Any] | None = None,
    method: str = "GET",
) -> Any:
    """Call the workspace's running node (with its bearer token, `node.http.auth`)."""
    import urllib.error
    import urllib.request

    from node.http.auth import bearer_headers, read_token

    data = json.dumps(body).encode() if body is not None else None
    headers = bearer_headers(read_token(root))
    if data:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(info.http_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=API_TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error", str(e))
        except ValueError:
            message = str(e)
        raise _refusal(e.code, f"node refused: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        from node.runfile import NodeNotRunning

        raise NodeNotRunning(f"cannot reach the node at {info.http_url}: {e}") from None


def _refusal(status: int, message: str) -> Exception:
    """The error a refusal by the node's API stands for, so that the exit code matches
    the status (404 not found, 503 unavailable; any other refusal is a usage error)."""
    if status == 404:
        from storage.errors import DatasetNotFound

        return DatasetNotFound(message)
    if status == 503:
        from node.runfile import NodeNotRunning

        return NodeNotRunning(message)
    from node.errors import UsageError

    return UsageError(message)


def _check_followable(ws: Workspace, ref: str) -> None:
    """Refuse an alias no dataset here has (3), as the node would; ``all`` and DIDs (a
    dataset not held yet) pass."""
    from fbs.did import DatasetId

    if ref == "all":
        return
    if ref.startswith("did:"):
        DatasetId.from_did(ref)
        return
    from storage.errors import DatasetNotFound

    try:
        ws.resolve(ref)
    except DatasetNotFound:
        raise DatasetNotFound(
            f"cannot follow {ref!r}: no such dataset here "
            "(follow a dataset not held yet by its DID)"
        ) from None


def cmd_status(args: argparse.Namespace) -> int:
    # Only the run file and the HTTP API: no dataset is opened, so no storage import.
    root = workspace_root(args)
    info = _running(root)
    if info is None:
        if _wants_json(args):
            print(json.dumps({"running": False}))
        else:
            print("No node is running for this workspace (start one with: odf node run)")
        return EXIT_NOT_FOUND
    doc = _api(root, info, "/api/status")
    if _wants_json(args):
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    print(f"Node {doc.get('peerId')} (pid {info.pid}), up {doc.get('uptimeSeconds')} s")
    print(f"  http:     {doc.get('httpUrl')}")
    for a in doc.get("addrs", []):
        print(f"  libp2p:   {a}")
    print(f"  datasets: {doc.get('datasets')}, peers: {doc.get('peers')}")
    names = doc.get("followNames") or {}
    follow = [names.get(f, f) for f in doc.get("follow") or []]
    print(f"  follow:   {', '.join(follow) if follow else '(nothing)'}")
    for p in doc.get("pulls", []):
        state = "running" if p["running"] else "queued"
        name = p.get("alias") or p["dataset"]
        print(f"  pull {state}: {name} #{p['sequenceNumber']} (attempts {p['attempts']})")
    for p in doc.get("recentPulls", [])[-5:]:
        print(
            f"  pulled:   {p.get('alias') or p['dataset']} #{p['sequenceNumber']} {p['detail']} "
            f"({p['objects']} objects, {p['bytes']} bytes, {p['seconds']} s)"
        )
    _print_dht(doc.get("dht"))
    _print_validator(doc.get("validator"))
    _print_disputes(doc)
    _print_bans(doc.get("libp2p"))
    _print_listener(doc.get("listener"))
    return EXIT_OK


def _print_dht(dht: Any) -> None:
    """Content routing: the routing table, what is provided, what lookups found."""
    if not isinstance(dht, dict):
        return
    if not dht.get("enabled"):
        print("  dht:      off")
        return
    print(
        f"  dht:      routing table {dht.get('routingTableSize')} peers, "
        f"providing {dht.get('provided')} datasets, {dht.get('lookups')} lookups "
        f"({dht.get('lookupsFound')} found a provider)"
    )
    for f in dht.get("providersFound") or []:
        seq = f.get("sequenceNumber")
        providers = ", ".join(f.get("providers") or []) or "none"
        print(
            f"  providers: {f.get('dataset')}"
            + (f" #{seq}" if seq is not None else "")
            + f": {providers} ({len(f.get('connected') or [])} connected)"
        )


def _print_bans(libp2p: Any) -> None:
    bans = libp2p.get("bans") if isinstance(libp2p, dict) else None
    for b in bans or []:
        print(f"  banned:   {b.get('peerId')} for {b.get('secondsLeft')} s more: {b.get('reason')}")


def _print_listener(check: Any) -> None:
    """The node's last self-probe of its libp2p listener (`node.daemon.liveness`)."""
    if not isinstance(check, dict) or check.get("lastCheckAt") is None:
        return
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(check["lastCheckAt"]))
    verdict = "ok" if check.get("ok") else f"FAILED: {check.get('error')}"
    restarts = check.get("restarts") or 0
    suffix = f" (restarted the host {restarts} times)" if restarts else ""
    print(f"  listener: checked {when}, {verdict}{suffix}")


def _print_validator(v: Any) -> None:
    if not isinstance(v, dict):
        return
    print(f"  validator: {v.get('validator')} ({v.get('engine')})")
    running = v.get("running")
    print(
        f"    backlog: {v.get('backlog')} block(s) not checked yet"
        + (f", checking {running}" if running else "")
        + (f", {len(v.get('queued') or [])} queued" if v.get("queued") else "")
    )
    for did, row in (v.get("datasets") or {}).items():
        signed = ", ".join(f"{k} {n}" for k, n in sorted((row.get("signed") or {}).items()))
        line = f"    {row.get('alias') or did}: backlog {row.get('backlog')}"
        if signed:
            line += f", signed {signed}"
        if row.get("waiting"):
            line += f", waiting: {row['waiting']}"
        if row.get("lastError"):
            line += f", last error: {row['lastError']}"
        print(line)


def _print_disputes(doc: dict[str, Any]) -> None:
    for d in doc.get("disputes") or []:
        what = []
        if d.get("disputed"):
            what.append("head DISPUTED")
        if d.get("divergentBlocks"):
            confirmed = "confirmed" if d.get("confirmed") else "unconfirmed"
            what.append(f"{d['divergentBlocks']} divergent block(s), {confirmed}")
        if d.get("equivocations"):
            what.append(f"{d['equivocations']} equivocation(s)")
        if d.get("refused"):
            what.append(f"REFUSED: {d['refused']}")
        print(f"  evidence: {d.get('alias') or d.get('dataset')}: {'; '.join(what)}")


def cmd_peers(args: argparse.Namespace) -> int:
    root = workspace_root(args)
    info = _running(root)
    if info is None:
        err("no node is running for this workspace")
        return EXIT_NOT_FOUND
    rows = _api(root, info, "/api/peers")
    if _wants_json(args):
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("No peers")
    table = sum(1 for r in rows if r.get("inRoutingTable"))
    if rows:
        print(f"Routing table: {table} peers")
    for r in rows:
        on = (
            ("connected", r["connected"]),
            ("banned", r["banned"]),
            ("routing", r.get("inRoutingTable")),
        )
        flags = [f for f, is_on in on if is_on]
        provides = r.get("provides") or []
        if provides:
            flags.append(f"provides {', '.join(provides)}")
        print(f"{r['peerId']}  score {r['score']:g}  {' '.join(flags)}")
    return EXIT_OK


def _warn_disputed(ws: Workspace, ref: str) -> None:
    from node.validation.disputes import disputed_warning

    warning = disputed_warning(ws, ref)
    if warning is not None:
        sys.stderr.write(f"odf: warning: {warning}\n")


def cmd_follow(args: argparse.Namespace) -> int:
    ws = open_workspace(args)
    _check_followable(ws, args.dataset)
    _warn_disputed(ws, args.dataset)
    info = _running(ws.root)
    if info is not None and not args.foreground:
        doc = _api(ws.root, info, "/api/follow", {"dataset": args.dataset}, method="POST")
        print(f"Following {doc['followed']} on the running node ({info.http_url})")
        return EXIT_OK
    if info is not None:
        err("a node already runs for this workspace; drop --foreground")
        return EXIT_USAGE
    from pathlib import Path

    from node.daemon.config import NodeConfig, load_config
    from node.daemon.service import run_daemon

    base = load_config(Path(args.config)) if args.config else NodeConfig()
    config = base.with_overrides(
        follow=[*base.follow, args.dataset],
        bootstrap=(list(base.bootstrap) + args.bootstrap) if args.bootstrap else None,
        http_port=args.http_port,
    )
    sys.stderr.write(f"Following {args.dataset} in the foreground (Ctrl-C stops)\n")
    run_daemon(ws, config)
    return EXIT_OK


def cmd_unfollow(args: argparse.Namespace) -> int:
    root = workspace_root(args)
    info = _running(root)
    if info is None:
        err("no node is running for this workspace")
        return EXIT_NOT_FOUND
    doc = _api(root, info, "/api/follow", {"dataset": args.dataset}, method="DELETE")
    print("Stopped following" if doc.get("removed") else "Was not followed", args.dataset)
    return EXIT_OK


def _json_flags(p: argparse.ArgumentParser) -> None:
    """``--json`` and its spelling ``-o json`` (the API's JSON: datasets by DID)."""
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument(
        "-o",
        "--output-format",
        choices=("table", "text", "json"),
        default="text",
        help="json: the same as --json (table and text: the default listing)",
    )


def _wants_json(args: argparse.Namespace) -> bool:
    return bool(args.json) or args.output_format == "json"


def register(sub: Any) -> None:
    """Add ``node`` (run, status, peers, follow, unfollow) to the top-level sub-parsers."""
    p = sub.add_parser(
        "node",
        help="run the peer-to-peer node, or query the running one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    nsub = p.add_subparsers(dest="node_command", metavar="COMMAND", required=True)

    _register_run(nsub)

    s = nsub.add_parser("status", help="status of the running node (datasets by alias)")
    s.set_defaults(func=cmd_status)
    _json_flags(s)

    s = nsub.add_parser("peers", help="peers of the running node with their scores")
    s.set_defaults(func=cmd_peers)
    _json_flags(s)

    f = nsub.add_parser("follow", help="replicate a dataset as new heads are announced")
    f.set_defaults(func=cmd_follow)
    f.add_argument("dataset", help="alias, DID, or 'all'")
    f.add_argument(
        "--foreground", action="store_true", help="run a follower node here (no running node)"
    )
    f.add_argument("--config", metavar="FILE", help="foreground: YAML config file")
    f.add_argument(
        "--bootstrap", action="append", default=[], metavar="MULTIADDR", help="foreground: peer"
    )
    f.add_argument("--http-port", type=int, metavar="PORT", help="foreground: HTTP API port")

    u = nsub.add_parser("unfollow", help="stop replicating a dataset")
    u.set_defaults(func=cmd_unfollow)
    u.add_argument("dataset", help="alias or DID as followed")


def _register_run(nsub: Any) -> None:
    """``odf node run`` and its options."""
    r = nsub.add_parser("run", help="serve the workspace to the network until stopped")
    r.set_defaults(func=cmd_run)
    r.add_argument("--config", metavar="FILE", help="YAML config file (see node.daemon.config)")
    r.add_argument(
        "--listen", action="append", metavar="MULTIADDR", help="libp2p listen address (repeat)"
    )
    r.add_argument(
        "--bootstrap", action="append", default=[], metavar="MULTIADDR", help="peer to dial"
    )
    r.add_argument("--mdns", action="store_true", help="LAN discovery (binds every interface)")
    r.add_argument("--http-host", metavar="HOST", help="HTTP API bind address (127.0.0.1)")
    r.add_argument("--http-port", type=int, metavar="PORT", help="HTTP API port (0: any)")
    r.add_argument(
        "--http-allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="host name accepted in the HTTP Host header besides IPs and localhost (repeat)",
    )
    r.add_argument(
        "--follow", action="append", metavar="DS", help="replicate DS (alias, DID or 'all')"
    )
    r.add_argument("--no-ingest", action="store_true", help="refuse push ingest over HTTP")
    r.add_argument(
        "--validator",
        action="store_true",
        help="check replicated blocks (replay transforms) and gossip signed attestations",
    )
    r.add_argument("--engine", metavar="HOST:PORT", help="engine for validator replays")
    r.add_argument(
        "--refuse-disputed",
        action="store_true",
        help="stop replicating publishers with confirmed divergence or equivocation",
    )
    r.add_argument(
        "--dht",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="content routing over odf's DHT (default on; --no-dht: peers of this node only)",
    )
    r.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    r.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        help="log lines on stderr: text or JSON (default auto: text on a terminal, else JSON)",
    )
    r.add_argument("-q", "--quiet", action="store_true", help="no startup summary")
