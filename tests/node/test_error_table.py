"""Every error class in the tree has one exit code and one HTTP status, from one table.

Each error class carries its failure category (`fbs.errors.ExitCategory`, the class
attribute ``exit_category``) and `node.error_contract.OUTCOMES` turns a category into the
``odf`` exit code and the HTTP status. This test walks every subclass of `OdfError` that
the packages define (every module imported) and holds each to `EXPECTED`: a new error
class fails here until its exit code is decided, and a class whose category changes
fails until the table (and README's exit-code paragraph) says so.
"""

from __future__ import annotations

import errno
import importlib
import pkgutil
from collections.abc import Iterator

import pytest

from fbs.errors import ExitCategory, OdfError
from node.error_contract import OUTCOMES, category_of, exit_code_for, http_status_for

#: The packages whose error classes are walked.
PACKAGES = ("fbs", "storage", "engine", "p2p", "node")

#: Every error class (module.qualname) -> (exit code, HTTP status).
EXPECTED: dict[str, tuple[int, int]] = {
    "engine.errors.CheckpointError": (1, 500),
    "engine.errors.EngineConfigError": (2, 400),
    "engine.errors.EngineError": (1, 500),
    "engine.errors.EngineInternalError": (1, 500),
    "engine.errors.EngineProtocolError": (1, 500),
    "engine.errors.EngineTimeout": (7, 503),
    "engine.errors.EngineUnavailable": (7, 503),
    "engine.errors.InvalidQuery": (4, 400),
    "fbs.errors.BlockLimitExceeded": (4, 400),
    "fbs.errors.DataSchemaMismatch": (4, 400),
    "fbs.errors.FbsError": (4, 400),
    "fbs.errors.InvalidDdlSchema": (4, 400),
    "fbs.errors.InvalidDid": (4, 400),
    "fbs.errors.InvalidHash": (4, 400),
    "fbs.errors.InvalidKey": (4, 400),
    "fbs.errors.InvalidMultiformat": (4, 400),
    "fbs.errors.InvalidName": (4, 400),
    "fbs.errors.InvalidSignature": (4, 400),
    "fbs.errors.InvalidTimestamp": (4, 400),
    "fbs.errors.InvalidValue": (4, 400),
    "fbs.errors.LogicalHashError": (4, 400),
    "fbs.errors.MalformedBlock": (4, 400),
    "fbs.errors.ManifestError": (4, 400),
    "fbs.errors.ManifestFieldError": (4, 400),
    "fbs.errors.ManifestLimitExceeded": (4, 400),
    "fbs.errors.OdfError": (1, 500),
    "fbs.errors.SchemaConversionError": (4, 400),
    "fbs.errors.UnsupportedDataType": (4, 400),
    "fbs.errors.UnsupportedVersion": (4, 400),
    "node.api.MissingDependency": (2, 400),
    "node.errors.AmbiguousRemote": (2, 400),
    "node.errors.DatasetInUse": (6, 409),
    "node.errors.DependencyCycle": (4, 400),
    "node.errors.EngineManagerError": (7, 503),
    "node.errors.EngineSettingsError": (2, 400),
    "node.errors.IncompatibleSchema": (4, 400),
    "node.errors.InputHistoryDiverged": (6, 409),
    "node.errors.InputNotReady": (3, 404),
    "node.errors.NodeError": (1, 500),
    "node.errors.NotDerivative": (4, 400),
    "node.errors.ReplicaReadOnly": (4, 422),
    "node.errors.TransformError": (4, 400),
    "node.errors.UsageError": (2, 400),
    "node.errors.VerificationFailed": (5, 422),
    "node.http.auth.TokenFileError": (4, 400),
    "node.ingest.errors.FetchError": (4, 400),
    "node.ingest.errors.IngestError": (4, 400),
    "node.ingest.errors.MergeError": (4, 400),
    "node.ingest.errors.PrepareError": (4, 400),
    "node.ingest.errors.PreprocessError": (4, 400),
    "node.ingest.errors.ReadError": (4, 400),
    "node.ingest.errors.SchemaError": (4, 400),
    "node.ingest.errors.SourceNotFound": (3, 404),
    "node.ingest.errors.SourceUnreachable": (7, 503),
    "node.ingest.errors.ToolMissing": (4, 400),
    "node.ingest.errors.UnsupportedFormat": (4, 400),
    "node.runfile.NodeAlreadyRunning": (6, 409),
    "node.runfile.NodeNotRunning": (7, 503),
    "p2p.errors.AttestationRejected": (4, 422),
    "p2p.errors.DuplicateAttestation": (6, 409),
    "p2p.errors.Equivocation": (6, 409),
    "p2p.errors.FrameTooLarge": (3, 404),
    "p2p.errors.HostError": (4, 400),
    "p2p.errors.HostNotRunning": (4, 400),
    "p2p.errors.IdentityError": (4, 400),
    "p2p.errors.InvalidAttestation": (4, 400),
    "p2p.errors.InvalidGossip": (4, 400),
    "p2p.errors.InvalidHeadRecord": (4, 400),
    "p2p.errors.NameConflict": (6, 409),
    "p2p.errors.NotDescendant": (6, 409),
    "p2p.errors.NotFoundOnPeer": (3, 404),
    "p2p.errors.P2PError": (4, 400),
    "p2p.errors.PeerMisbehaved": (4, 400),
    "p2p.errors.PeerUnavailable": (3, 404),
    "p2p.errors.RemoteError": (3, 404),
    "p2p.errors.SourceUnreachable": (7, 503),
    "p2p.errors.StaleHead": (6, 409),
    "p2p.errors.TransferError": (3, 404),
    "p2p.errors.TransferTimeout": (3, 404),
    "p2p.errors.UnknownAttestedDataset": (4, 422),
    "p2p.http.source.Unauthorized": (3, 404),
    "p2p.libp2p.exchange.client._LocalLimit": (3, 404),
    "p2p.libp2p.exchange.wire.BadRequest": (4, 400),
    "p2p.libp2p.exchange.wire.Misbehaved": (4, 400),
    "p2p.libp2p.exchange.wire.StreamEnded": (3, 404),
    "p2p.peer_json.PeerJsonError": (4, 400),
    "p2p.receive.ChainRuleBroken": (4, 400),
    "p2p.smart_transfer.client.SmartRefused": (3, 404),
    "p2p.smart_transfer.messages.MalformedMessage": (4, 400),
    "storage.errors.ChainError": (4, 400),
    "storage.errors.ChainRuleViolation": (4, 400),
    "storage.errors.CorruptChain": (5, 500),
    "storage.errors.CorruptObject": (5, 500),
    "storage.errors.DamagedObject": (5, 500),
    "storage.errors.DatasetError": (4, 400),
    "storage.errors.DatasetExists": (6, 409),
    "storage.errors.DatasetNotFound": (3, 404),
    "storage.errors.HashMismatch": (4, 400),
    "storage.errors.InvalidAlias": (2, 400),
    "storage.errors.InvalidAppend": (4, 400),
    "storage.errors.InvalidCommit": (4, 400),
    "storage.errors.InvalidDataFile": (5, 500),
    "storage.errors.InvalidDatasetConfig": (4, 400),
    "storage.errors.InvalidRef": (5, 500),
    "storage.errors.InvalidRefName": (4, 400),
    "storage.errors.KeyStoreError": (4, 400),
    "storage.errors.MissingObject": (5, 500),
    "storage.errors.ObjectNotFound": (3, 404),
    "storage.errors.ObjectTooLarge": (4, 400),
    "storage.errors.RefCASFailed": (6, 409),
    "storage.errors.RefError": (4, 400),
    "storage.errors.RefLockTimeout": (6, 409),
    "storage.errors.RefNotFound": (3, 404),
    "storage.errors.StorageError": (4, 400),
    "storage.s3.errors.ConditionalWritesUnsupported": (4, 400),
    "storage.s3.errors.InvalidS3Url": (4, 400),
    "storage.s3.errors.S3Error": (4, 400),
    "storage.s3.errors.S3Unavailable": (7, 503),
    "storage.errors.UnsafePath": (5, 500),
    "storage.errors.WorkspaceError": (4, 400),
    "storage.errors.WorkspaceNotFound": (3, 404),
}

#: OS errors (not odf-node's own) and anything else that escapes a command.
OTHER: list[tuple[BaseException, int, int]] = [
    (FileNotFoundError(errno.ENOENT, "gone"), 3, 404),
    (IsADirectoryError(errno.EISDIR, "dir"), 2, 400),
    (PermissionError(errno.EACCES, "no"), 4, 400),
    (OSError(errno.ENOSPC, "full"), 4, 400),
    (RuntimeError("a bug"), 1, 500),
    (KeyError("a bug"), 1, 500),
]


def _import_everything() -> None:
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if not info.name.endswith(".__main__"):  # runs a program when imported
                importlib.import_module(info.name)


def _subclasses(cls: type[OdfError]) -> Iterator[type[OdfError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


def _tree() -> dict[str, type[OdfError]]:
    _import_everything()
    classes = {c for c in _subclasses(OdfError) if c.__module__.split(".")[0] in PACKAGES}
    return {f"{c.__module__}.{c.__qualname__}": c for c in classes}


TREE = _tree()


def test_the_table_names_every_error_class_and_no_other() -> None:
    assert sorted(TREE) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_error_class_maps_to_its_exit_code_and_http_status(name: str) -> None:
    cls = TREE[name]
    error = cls.__new__(cls)  # no constructor call: some take typed arguments
    assert (exit_code_for(error), http_status_for(error)) == EXPECTED[name]
    assert category_of(error) is cls.exit_category


@pytest.mark.parametrize(("error", "code", "status"), OTHER)
def test_errors_from_outside_map_too(error: BaseException, code: int, status: int) -> None:
    assert (exit_code_for(error), http_status_for(error)) == (code, status)


def test_every_category_has_one_outcome_and_only_bugs_exit_1() -> None:
    assert set(OUTCOMES) == set(ExitCategory)
    internal = [c for c, o in OUTCOMES.items() if o.exit_code == 1 or o.http_status == 500]
    assert internal == [ExitCategory.INTERNAL, ExitCategory.DAMAGED]
    assert OUTCOMES[ExitCategory.DAMAGED].exit_code == 5


def test_the_decided_disagreements() -> None:
    """An unreachable source is unavailable (7) wherever it is raised; a name conflict is
    a conflict (6): README's words, once for the CLI and the HTTP API."""
    from node.ingest.errors import SourceUnreachable as IngestUnreachable
    from p2p.errors import NameConflict
    from p2p.errors import SourceUnreachable as P2PUnreachable

    for cls in (IngestUnreachable, P2PUnreachable):
        assert (exit_code_for(cls("x")), http_status_for(cls("x"))) == (7, 503)
    assert (exit_code_for(NameConflict("x")), http_status_for(NameConflict("x"))) == (6, 409)
