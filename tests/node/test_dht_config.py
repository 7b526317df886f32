"""The daemon's content-routing settings: config file keys, the CLI flag, the host they build."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from node.commands import node as node_command
from node.daemon.config import NodeConfig, parse_config
from node.daemon.host import DAEMON_DHT_SETTINGS
from node.errors import UsageError


def test_the_dht_is_on_by_default_and_the_file_can_turn_it_off() -> None:
    assert NodeConfig().dht
    cfg = parse_config({"dht": False, "dht_lookup_interval_s": 5})
    assert not cfg.dht and cfg.dht_lookup_interval_s == 5
    # A whole lookup ends before `odf pull did:...` stops waiting for the node (30 s).
    assert DAEMON_DHT_SETTINGS.lookup_timeout_s < 30


@pytest.mark.parametrize(
    "doc", [{"dht": "yes"}, {"dht_lookup_interval_s": 0}, {"dht_lookup_interval_s": 1e9}]
)
def test_bad_dht_settings_are_usage_errors(doc: object) -> None:
    with pytest.raises(UsageError):
        parse_config(doc)


def _run_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    node_command.register(parser.add_subparsers())
    return parser.parse_args(["node", "run", *argv])


def test_the_cli_flag_overrides_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "node.yaml"
    cfg.write_text("dht: false\n")
    assert not node_command._config(_run_args("--config", str(cfg))).dht
    assert node_command._config(_run_args("--config", str(cfg), "--dht")).dht
    assert not node_command._config(_run_args("--no-dht")).dht
    assert node_command._config(_run_args()).dht
