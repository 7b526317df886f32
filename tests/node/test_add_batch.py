"""`node.add_batch`: account naming and dependency order of an ``odf add`` batch (pure)."""

from __future__ import annotations

import pytest

from fbs.did import AccountName, DatasetId
from fbs.errors import ManifestError, ManifestFieldError
from fbs.model import DatasetKind, DatasetSnapshot, SetTransform, TransformInput, TransformSql
from node.add_batch import BatchItem, apply_account, order_batch
from node.errors import DependencyCycle

ALICE = AccountName("alice")


def snap(name: str, *refs: str) -> DatasetSnapshot:
    if not refs:
        return DatasetSnapshot(name=name, kind=DatasetKind.Root, metadata=())
    inputs = tuple(TransformInput(dataset_ref=r, alias=r) for r in refs)
    event = SetTransform(inputs=inputs, transform=TransformSql(engine="spark", query="SELECT 1"))
    return DatasetSnapshot(name=name, kind=DatasetKind.Derivative, metadata=(event,))


def names(items: tuple[BatchItem, ...]) -> list[str]:
    return [i.snapshot.name for i in items]


def batch(*snaps: DatasetSnapshot) -> list[BatchItem]:
    return [BatchItem(f"f{n}.yaml", s) for n, s in enumerate(snaps)]


def test_order_follows_inputs_and_keeps_the_given_order_otherwise() -> None:
    items = batch(snap("d", "c", "b"), snap("x"), snap("c", "A"), snap("b"), snap("a"))
    assert names(order_batch(items)) == ["x", "b", "a", "c", "d"]


def test_self_workspace_and_did_inputs_impose_no_order() -> None:
    did = DatasetId.new_seeded(b"x").to_did_odf()
    items = batch(snap("a", "a", "elsewhere", did), snap("b"))
    assert names(order_batch(items)) == ["a", "b"]


def test_account_qualified_inputs_match_only_their_account() -> None:
    items = batch(snap("alice/b", "alice/a"), snap("alice/a"), snap("c", "a"))
    assert names(order_batch(items)) == ["alice/a", "alice/b", "c"]


def test_a_cycle_is_named() -> None:
    items = batch(snap("root"), snap("p", "r"), snap("q", "p", "root"), snap("r", "q"))
    with pytest.raises(DependencyCycle, match="p -> r -> q -> p"):
        order_batch(items)


def test_the_same_name_twice_is_refused() -> None:
    with pytest.raises(ManifestError, match=r"also added by f0\.yaml"):
        order_batch(batch(snap("Same"), snap("same")))


def test_account_names_the_snapshot_and_its_bare_inputs() -> None:
    got = apply_account(snap("d", "a", "bob/b"), ALICE)
    assert got.name == "alice/d"
    assert got.metadata[0].inputs == (  # type: ignore[union-attr]
        TransformInput(dataset_ref="alice/a", alias="a"),
        TransformInput(dataset_ref="bob/b", alias="bob/b"),
    )
    assert apply_account(snap("Alice/d"), ALICE).name == "Alice/d"
    assert apply_account(snap("d", "a"), None) == snap("d", "a")


@pytest.mark.parametrize(
    ("name", "account", "needle"),
    [
        ("alice/d", None, "may not contain '/'"),
        ("bob/d", ALICE, "not to the acting account alice"),
        ("a/b/c", ALICE, "alias must be"),
        ("bad name", None, "invalid dataset name"),
    ],
)
def test_bad_names_are_refused(name: str, account: AccountName | None, needle: str) -> None:
    with pytest.raises(ManifestFieldError, match=needle) as e:
        apply_account(snap(name), account)
    assert e.value.path == "content.name"
