"""Remote aliases, as kamu keeps them: a replica is updated from where it was pulled, a
dataset pushed again goes where it went before (``info/config``, kamu's DatasetConfig).

End to end against a real node API on loopback (server in a thread), through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fbs.errors import ManifestError, ManifestFieldError
from fbs.manifest.dataset_config import (
    MAX_REMOTE_ALIAS_LEN,
    MAX_REMOTE_ALIASES,
    DatasetConfig,
    dump_dataset_config,
    parse_dataset_config,
)
from node.cli import main as odf
from node.cli_util import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from node.http.auth import TOKEN_ENV, token_path
from storage.errors import InvalidDatasetConfig
from storage.layout import MAX_CONFIG_FILE_SIZE, DatasetLayout
from storage.workspace import Workspace
from tests.node.test_remote import node  # noqa: F401  (the served-node fixture)
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

# What kamu writes for a dataset pulled from one URL (serde_yaml of its DatasetConfig).
KAMU_CONFIG = """\
kind: DatasetConfig
version: 1
content:
  pullAliases:
  - odf+https://node.example.org/alice/prices
  pushAliases: []
"""
EMPTY = "{pullAliases: [], pushAliases: []}"


def run(ws: Workspace, *argv: str) -> int:
    return odf(["--workspace", str(ws.root.parent), *argv])


def cloned(served_node: tuple[Workspace, str], tmp: Path) -> tuple[Workspace, str, Workspace]:
    """The served workspace, its URL, and a workspace that cloned its "prices" by URL."""
    served, url = served_node
    make_dataset(served, "prices", tmp / "f", 1)
    mine = new_workspace(tmp / "mine")
    assert run(mine, "pull", f"{url}/prices", "--no-progress") == EXIT_OK
    return served, url, mine


def config_of(ws: Workspace, ref: str) -> DatasetConfig:
    return ws.get(ref).layout.read_config()


# -- the file ------------------------------------------------------------------------------


def test_kamu_config_round_trips_byte_for_byte() -> None:
    config = parse_dataset_config(KAMU_CONFIG.encode())
    assert config.pull_aliases == ("odf+https://node.example.org/alice/prices",)
    assert config.push_aliases == ()
    assert dump_dataset_config(config) == KAMU_CONFIG


def test_adding_an_alias_twice_keeps_one_and_the_other_kind() -> None:
    config = DatasetConfig().with_pull_alias("http://a/x").with_pull_alias("http://a/x")
    assert config == DatasetConfig(("http://a/x",), ())
    both = config.with_push_alias("http://b").with_push_alias("http://b")
    assert both == DatasetConfig(("http://a/x",), ("http://b",))
    assert both.with_pull_alias("http://c") == DatasetConfig(
        ("http://a/x", "http://c"), ("http://b",)
    )


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (f"kind: DatasetSnapshot\nversion: 1\ncontent: {EMPTY}", "kind"),
        (f"kind: DatasetConfig\nversion: 2\ncontent: {EMPTY}", "version"),
        (f"kind: DatasetConfig\nversion: true\ncontent: {EMPTY}", "version"),
        ("kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: []}", "content.pushAliases"),
        (
            "kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: [], pushAliases: [], x: 1}",
            "content.x",
        ),
        (
            "kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: x, pushAliases: []}",
            "content.pullAliases",
        ),
        (
            "kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: [], pushAliases: x}",
            "content.pushAliases",
        ),
        (
            "kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: [1], pushAliases: []}",
            "content.pullAliases[0]",
        ),
        (
            "kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: [], pushAliases: ['a', '']}",
            "content.pushAliases[1]",
        ),
        (
            "kind: DatasetConfig\nversion: 1\ncontent: {pullAliases: [' a'], pushAliases: []}",
            "content.pullAliases[0]",
        ),
        ("kind: DatasetConfig\nversion: 1\ncontent: []", "content"),
        ("kind: DatasetConfig\nversion: 1\ncontent: {}\nextra: 1", ""),
        ("- not a mapping", ""),
    ],
)
def test_malformed_configs_are_refused_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(ManifestFieldError) as info:
        parse_dataset_config(text)
    assert info.value.path == path


def test_alias_length_is_bounded() -> None:
    for alias in ("x", "h" * MAX_REMOTE_ALIAS_LEN):
        config = DatasetConfig((alias,), (alias,))
        assert parse_dataset_config(dump_dataset_config(config)) == config
    too_long = "h" * (MAX_REMOTE_ALIAS_LEN + 1)
    with pytest.raises(ManifestError):
        dump_dataset_config(DatasetConfig((), (too_long,)))
    text = (
        f"kind: DatasetConfig\nversion: 1\ncontent: {{pullAliases: [{too_long}], pushAliases: []}}"
    )
    with pytest.raises(ManifestFieldError) as info:
        parse_dataset_config(text)
    assert info.value.path == "content.pullAliases[0]"


def test_alias_count_is_bounded() -> None:
    many = "".join(f"  - http://h/{i}\n" for i in range(MAX_REMOTE_ALIASES + 1))
    text = f"kind: DatasetConfig\nversion: 1\ncontent:\n  pullAliases:\n{many}  pushAliases: []\n"
    with pytest.raises(ManifestFieldError, match="more than") as info:
        parse_dataset_config(text)
    assert info.value.path == "content.pullAliases"
    within = DatasetConfig(tuple(f"http://h/{i}" for i in range(MAX_REMOTE_ALIASES)))
    assert parse_dataset_config(dump_dataset_config(within)) == within


def test_an_alias_the_format_cannot_hold_is_not_written(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    with pytest.raises(InvalidDatasetConfig):
        layout.write_config(DatasetConfig(("http://a\nb",)))
    assert not layout.config_path.exists()


def test_layout_reads_none_writes_and_refuses_damage(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    assert layout.read_config() == DatasetConfig()
    layout.write_config(DatasetConfig(("http://a/x",), ("odf+http://b/y",)))
    assert layout.read_config() == DatasetConfig(("http://a/x",), ("odf+http://b/y",))
    layout.config_path.write_text("pullAliases: []\n")  # a pre-manifest file: not kamu's form
    with pytest.raises(InvalidDatasetConfig, match="config"):
        layout.read_config()
    layout.config_path.write_bytes(b"#" * (MAX_CONFIG_FILE_SIZE + 1))
    with pytest.raises(InvalidDatasetConfig, match="larger than"):
        layout.read_config()


# -- pull ----------------------------------------------------------------------------------


def test_a_replica_is_pulled_again_from_where_it_came(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    served, url = node
    ds = make_dataset(served, "prices", tmp_path / "f", 2)
    mine = new_workspace(tmp_path / "mine")
    assert run(mine, "pull", f"{url}/prices", "--no-progress") == EXIT_OK
    assert config_of(mine, "prices").pull_aliases == (f"{url}/prices",)

    add_slices(ds, tmp_path / "g", 2)
    assert mine.get("prices").head() != ds.head()
    assert run(mine, "pull", "prices", "--no-progress") == EXIT_OK
    assert mine.get("prices").head() == ds.head()

    # --all updates replicas too (a push-only root would otherwise be passed by).
    add_slices(ds, tmp_path / "h", 1)
    assert run(mine, "pull", "--all", "--no-progress") == EXIT_OK
    assert mine.get("prices").head() == ds.head()
    assert config_of(mine, "prices").pull_aliases == (f"{url}/prices",)


def test_no_alias_pulls_without_remembering(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    served, url = node
    make_dataset(served, "prices", tmp_path / "f", 1)
    mine = new_workspace(tmp_path / "mine")
    assert run(mine, "pull", f"odf+{url}/prices", "--no-progress", "--no-alias") == EXIT_OK
    assert config_of(mine, "prices") == DatasetConfig()
    assert not mine.get("prices").layout.config_path.exists()


def test_a_replica_refuses_a_local_watermark(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _served, _url, mine = cloned(node, tmp_path)
    head = mine.get("prices").head()
    capsys.readouterr()
    rc = run(mine, "pull", "prices", "--set-watermark", "2030-01-01T00:00:00Z")
    assert rc == EXIT_INVALID  # a replica is read-only (node.ownership)
    assert "fork its history" in capsys.readouterr().err
    assert mine.get("prices").head() == head


def test_several_pull_aliases_are_ambiguous(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _served, url, mine = cloned(node, tmp_path)
    assert run(mine, "pull", f"odf+{url}/prices", "--no-progress") == EXIT_OK
    assert config_of(mine, "prices").pull_aliases == (f"{url}/prices", f"odf+{url}/prices")
    capsys.readouterr()
    assert run(mine, "pull", "prices") == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2 pull aliases" in err and f"odf+{url}/prices" in err


def test_a_damaged_config_is_a_one_line_error(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    _served, _url, mine = cloned(node, tmp_path)
    mine.get("prices").layout.config_path.write_text("kind: [")
    head = mine.get("prices").head()
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(mine.root.parent), "pull", "prices"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.startswith("odf: error: ") and proc.stderr.count("\n") == 1
    assert "info/config" in proc.stderr
    assert mine.get("prices").head() == head


# -- push ----------------------------------------------------------------------------------


def test_a_dataset_is_pushed_again_where_it_went(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served, url = node
    mine = new_workspace(tmp_path / "mine")
    own = make_dataset(mine, "mine.data", tmp_path / "f", 1)
    monkeypatch.setenv(TOKEN_ENV, token_path(served.root).read_text().strip())

    assert run(mine, "push", "mine.data") == EXIT_USAGE  # nowhere to push yet
    assert "no push alias" in capsys.readouterr().err
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}", "--as", "theirs") == EXIT_OK
    # The alias is the dataset's URL on the node: the next push needs no --as.
    assert config_of(mine, "mine.data").push_aliases == (f"odf+{url}/theirs",)
    assert served.get("theirs").head() == own.head()

    add_slices(own, tmp_path / "g", 2)
    assert run(mine, "push", "mine.data") == EXIT_OK
    assert served.get("theirs").head() == own.head()
    assert [e.alias for e in served.list()] == ["theirs"]

    add_slices(own, tmp_path / "h", 1)
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}/theirs", "--no-alias") == EXIT_OK
    assert served.get("theirs").head() == own.head()
    assert config_of(mine, "mine.data").push_aliases == (f"odf+{url}/theirs",)


def test_the_limits_are_pinned_at_their_boundaries() -> None:
    """64 aliases of a kind and 2,048 characters per alias, by value (a test computing its
    data from the constants would follow a changed constant)."""
    assert (MAX_REMOTE_ALIASES, MAX_REMOTE_ALIAS_LEN) == (64, 2048)
    ok = DatasetConfig(tuple(f"http://h/{i}" for i in range(64)), ("h" * 2048,))
    assert parse_dataset_config(dump_dataset_config(ok)) == ok
    for bad in (
        DatasetConfig(tuple(f"http://h/{i}" for i in range(65))),
        DatasetConfig(("h" * 2049,)),
    ):
        with pytest.raises(ManifestFieldError):
            parse_dataset_config(dump_yaml_unchecked(bad))


def dump_yaml_unchecked(config: DatasetConfig) -> str:
    """The file text for ``config`` without `dump_dataset_config`'s own checks."""
    from fbs.manifest.yamlio import dump_yaml

    content = {"pullAliases": list(config.pull_aliases), "pushAliases": list(config.push_aliases)}
    return dump_yaml({"kind": "DatasetConfig", "version": 1, "content": content})
