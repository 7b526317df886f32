"""The import contract of p2p's transport-free core covers every module at p2p's top.

`lint-imports` checks the modules the contract lists; a new module at the top of `p2p`
that is not listed would escape it unnoticed. This test fails until it is listed (or
moved into the transport sub-package it belongs to).
"""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import p2p

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# p2p.dht is not a transport but runs on one (a libp2p host): the core must not import it.
TRANSPORTS = {"p2p.libp2p", "p2p.http", "p2p.smart_transfer", "p2p.s3", "p2p.dht"}


def _core_contract() -> dict[str, list[str]]:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (core,) = [c for c in contracts if c["name"].startswith("p2p's transport-free core")]
    return core


def test_core_contract_lists_every_top_level_module_and_forbids_every_transport() -> None:
    core = _core_contract()
    top = {f"p2p.{m.name}" for m in pkgutil.iter_modules(p2p.__path__)}
    assert set(core["source_modules"]) == top - TRANSPORTS
    assert set(core["forbidden_modules"]) == TRANSPORTS
    assert top >= TRANSPORTS  # the sub-packages the contract names exist
