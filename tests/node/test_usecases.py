"""The use-case layer (`node.usecases`) on real workspaces: how a pull classifies each
reference, what a pull of the whole workspace takes in, the options a use-case refuses,
and a delete's plan. The CLI tests run the same functions through ``odf``."""

from __future__ import annotations

import pytest

from fbs.model import DatasetKind, DatasetSnapshot
from fbs.timestamp import Timestamp
from node.errors import DatasetInUse, UsageError
from node.remote.aliases import remember_remote
from node.usecases import delete, pull, push, verify
from node.usecases.pull import PullKind, PullOptions
from storage.errors import DatasetNotFound
from storage.workspace import Workspace
from tests.node.conftest import add_derivative

DID = "did:odf:fed01" + "ab" * 32
WATERMARK = Timestamp.parse_rfc3339("2030-01-01T00:00:00Z")


@pytest.fixture
def three(ws: Workspace) -> Workspace:
    """A push-only root ``raw``, its derivative ``copy``, and a replica ``mirror``."""
    ws.add_snapshot(DatasetSnapshot(name="raw", kind=DatasetKind.Root, metadata=()))
    add_derivative(ws, "copy", ["raw"], "SELECT * FROM raw")
    ws.add_snapshot(DatasetSnapshot(name="mirror", kind=DatasetKind.Root, metadata=()))
    remember_remote(ws, "mirror", "http://node:8080/mirror", "pull")
    return ws


@pytest.mark.parametrize(
    ("ref", "kind"),
    [
        ("http://node:8080/x", PullKind.URL),
        ("odf+https://node/x", PullKind.URL),
        ("/ip4/127.0.0.1/tcp/1/p2p/QmPeer/" + DID, PullKind.NETWORK),
        (DID, PullKind.NETWORK),
        ("raw", PullKind.ROOT),
        ("copy", PullKind.DERIVATIVE),
        ("mirror", PullKind.REPLICA),
    ],
)
def test_a_pull_classifies_each_reference(three: Workspace, ref: str, kind: PullKind) -> None:
    target = pull.classify(three, ref, PullOptions())
    assert (target.ref, target.kind) == (ref, kind)
    assert target.url == {"mirror": "http://node:8080/mirror"}.get(
        ref, ref if kind == "url" else None
    )


def test_a_local_did_is_pulled_by_its_kind_not_over_the_network(three: Workspace) -> None:
    did = str(three.resolve("copy").id)
    assert pull.classify(three, did, PullOptions()).kind is PullKind.DERIVATIVE


@pytest.mark.parametrize("ref", ["copy", "mirror"])
def test_a_watermark_is_refused_where_it_would_fork_or_mean_nothing(
    three: Workspace, ref: str
) -> None:
    with pytest.raises(UsageError, match="watermark"):
        pull.classify(three, ref, PullOptions(set_watermark=WATERMARK))
    assert pull.classify(three, "raw", PullOptions(set_watermark=WATERMARK)).kind is PullKind.ROOT


def test_an_unknown_local_name_is_not_found(three: Workspace) -> None:
    with pytest.raises(DatasetNotFound):
        pull.classify(three, "nosuch", PullOptions())


def test_a_pull_of_everything_takes_replicas_then_roots_then_derivatives(
    three: Workspace,
) -> None:
    found = pull.all_targets(three)
    assert found.targets == ("mirror", "copy")  # raw has nothing to poll
    assert found.push_only == ("raw",)


@pytest.mark.parametrize(("targets", "everything"), [((), False), (("raw",), True)])
def test_a_pull_of_nothing_or_of_both_is_a_usage_error(
    targets: tuple[str, ...], everything: bool
) -> None:
    with pytest.raises(UsageError):
        pull.check_options(targets, everything)
    pull.check_options(("raw",), False)
    pull.check_options((), True)


def test_a_push_without_a_destination_names_the_missing_alias(three: Workspace) -> None:
    with pytest.raises(UsageError, match="raw has no push alias"):
        push.push(three, push.PushOptions(dataset="raw"))
    remember_remote(three, "raw", "http://node:8080", "push")
    assert push.remembered_destination(three, "raw") == "http://node:8080"


@pytest.mark.parametrize(
    "options",
    [
        verify.VerifyOptions(trust=1, integrity=True),
        verify.VerifyOptions(logical_hashes=True),
        verify.VerifyOptions(integrity=True, recursive=True),
    ],
)
def test_verify_refuses_options_that_exclude_each_other(options: verify.VerifyOptions) -> None:
    with pytest.raises(UsageError):
        verify.check_options(options)


def test_verify_integrity_reports_each_dataset(three: Workspace) -> None:
    outcome = verify.verify_integrity(three, verify.VerifyOptions(("raw",), integrity=True))
    ((entry, report),) = outcome.reports
    assert entry.alias == "raw" and report.ok and outcome.temp_files == ()


def test_a_delete_takes_readers_first_or_refuses_to_orphan_them(three: Workspace) -> None:
    with pytest.raises(DatasetInUse, match="cannot delete raw: copy takes it as an input"):
        delete.doomed_datasets(three, ("raw",), recursive=False)
    doomed = delete.doomed_datasets(three, ("raw",), recursive=True)
    assert [e.alias for e in doomed] == ["copy", "raw"]
    assert [e.alias for e in delete.delete_datasets(three, doomed)] == ["copy", "raw"]
    assert [e.alias for e in three.list()] == ["mirror"]
