"""The validator core: check every block not yet checked and sign what was found.

For a dataset in a workspace, `Validator.validate` walks the chain oldest first and
checks each data block this validator has not attested yet:

- objects first (``AddData`` and ``ExecuteTransform``): the data file must be present
  with its recorded size and physical hash, and hash logically to the recorded logical
  hash; the checkpoint must be present. A file whose logical hash differs is the
  publisher's fault (``diverged``, ``newData.logicalHash``); a missing or damaged local
  copy is ours (``could-not-check``);
- then, for ``ExecuteTransform``, a replay of that one block on the engine
  (`node.validation.replay.replay_transform_block`: the recorded inputs, previous checkpoint and
  system time): ``reproduced``, ``diverged`` with the first differing field, or
  ``could-not-check`` (an input block not held locally, an engine that refuses the
  query). When the transform was pinned to another engine identity, a difference is
  reported as ``could-not-check`` (another Spark may legitimately compute otherwise), a
  match as ``reproduced``.

Root datasets get the object checks only. Each verdict is signed with the validator key
(`p2p.attestation.sign_attestation`) and stored in the workspace's attestation store
as soon as it is made, so an interrupted run keeps its progress; a block counts as
checked once the store holds an attestation of it by this validator. Engine failures
(unavailable, internal error) stop the run without signing anything for that block:
they say nothing about the data. The blocks left are the `backlog`.

Inside the node daemon the validator is run by `node.validation.worker.ValidatorWorker`,
with ``wait_for_inputs``: a derivative block whose recorded input blocks are not
replicated yet (`missing_input`) is left for later instead of being attested
``could-not-check``.

The validator key is not a dataset key: `load_or_create_validator_key` keeps it in
``.odf/p2p/validator.key`` (the 32-byte ed25519 seed, mode 0600).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.keys import KeyPair
from fbs.model import (
    AddData,
    ExecuteTransform,
    MetadataBlock,
    SetDataSchema,
    SetTransform,
    SetVocab,
    TransformSql,
)
from fbs.multiformats import Multihash
from fbs.rules import new_checkpoint, new_data
from node.errors import InputNotReady
from node.transform import identity_warning
from p2p.attestation import MAX_REASON_CHARS, Attestation, Verdict, sign_attestation
from p2p.attestation_store import AttestationStore
from p2p.errors import DuplicateAttestation, IdentityError
from p2p.head_store import P2P_DIR
from storage.dataset import Dataset
from storage.errors import DatasetNotFound, InvalidAlias, ObjectNotFound, StorageError
from storage.fsutil import atomic_write_bytes, ensure_dir, open_for_read
from storage.hashing import logical_hash_parquet

if TYPE_CHECKING:
    from engine.client import EngineClient
    from node.validation.replay import InputHistories
    from storage.workspace import Workspace

__all__ = [
    "VALIDATOR_KEY_FILE",
    "BlockVerdict",
    "ValidationRun",
    "Validator",
    "check_block_objects",
    "load_or_create_validator_key",
    "missing_input",
]

log = logging.getLogger("odf.validator")

#: The validator key file inside ``.odf/p2p``.
VALIDATOR_KEY_FILE: Final = "validator.key"
_KEY_SIZE: Final = 32
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


# -- the validator key -------------------------------------------------------------------------


def load_or_create_validator_key(ws: Workspace) -> KeyPair:
    """The workspace's validator key, created (mode 0600) on first use.

    Raises:
        IdentityError: the key file is a symlink, not a regular file, readable by
            others, or not 32 bytes.
        OSError: the new file cannot be written.
    """
    path = Path(ws.root) / P2P_DIR / VALIDATOR_KEY_FILE
    if not os.path.lexists(path):
        key = KeyPair.generate()
        ensure_dir(path.parent)
        atomic_write_bytes(path, key.private_bytes(), mode=0o600)
        return key
    try:
        f = open_for_read(path)
    except (OSError, StorageError) as e:
        raise IdentityError(f"cannot open validator key {path}: {e}") from None
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise IdentityError(f"validator key {path} is not a regular file")
        if st.st_mode & 0o077:
            raise IdentityError(f"validator key {path} is accessible by others; run chmod 600")
        data = f.read(_KEY_SIZE + 1)
    if len(data) != _KEY_SIZE:
        raise IdentityError(f"validator key {path} is not a {_KEY_SIZE}-byte ed25519 seed")
    return KeyPair(data)


# -- verdicts ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlockVerdict:
    """What checking one block found (before signing).

    Attributes:
        block_hash / sequence_number: the block.
        verdict / detail: see `p2p.attestation.Attestation`.
    """

    block_hash: Multihash
    sequence_number: int
    verdict: Verdict
    detail: str = ""


def _reason(text: str) -> str:
    """A could-not-check reason that fits the attestation limits."""
    text = _CONTROL_RE.sub(" ", text).strip() or "unknown"
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def check_block_objects(ds: Dataset, h: Multihash, block: MetadataBlock) -> BlockVerdict | None:
    """Check the objects an ``AddData``/``ExecuteTransform`` block names.

    Returns:
        ``None`` when they are sound, else the verdict (``diverged`` for a data file
        whose logical hash is not the recorded one, ``could-not-check`` for a missing or
        damaged local copy).
    """
    event = block.event
    assert isinstance(event, AddData | ExecuteTransform)
    seq = block.sequence_number

    def cannot(reason: str) -> BlockVerdict:
        return BlockVerdict(h, seq, Verdict.COULD_NOT_CHECK, _reason(reason))

    d = new_data(event)
    if d is not None:
        store = ds.layout.data
        try:
            if store.size(d.physical_hash) != d.size:
                return cannot(f"local copy of data object {d.physical_hash} has the wrong size")
            store.check(d.physical_hash)
        except ObjectNotFound:
            return cannot(f"data object {d.physical_hash} is missing")
        except StorageError as e:
            return cannot(f"local copy of data object {d.physical_hash} is damaged: {e}")
        try:
            with store.open(d.physical_hash) as f:
                actual = logical_hash_parquet(f)
        except (FbsError, StorageError, OSError, ValueError, TypeError) as e:
            # The file has the recorded physical hash: the publisher wrote an
            # unreadable slice.
            log.info("block %s: data %s cannot be hashed: %s", h, d.physical_hash, e)
            return BlockVerdict(h, seq, Verdict.DIVERGED, "newData.logicalHash")
        if actual != d.logical_hash:
            return BlockVerdict(h, seq, Verdict.DIVERGED, "newData.logicalHash")
    c = new_checkpoint(event)
    if c is not None:
        try:
            ds.layout.checkpoints.check(c.physical_hash)
        except ObjectNotFound:
            return cannot(f"checkpoint object {c.physical_hash} is missing")
        except StorageError as e:
            return cannot(f"local copy of checkpoint {c.physical_hash} is damaged: {e}")
    return None


def _chain_hashes(ws: Workspace, did: DatasetId) -> set[Multihash] | None:
    try:
        ds = ws.get(ws.resolve(did).id)
        return {h for h, _raw, _b in ds.iter_blocks()}
    except (DatasetNotFound, InvalidAlias, FbsError):
        return None


def missing_input(
    ws: Workspace,
    event: ExecuteTransform,
    cache: dict[DatasetId, set[Multihash] | None] | None = None,
) -> str | None:
    """Why ``event`` cannot be replayed here yet: an input or input block not held.

    Args:
        ws: the workspace holding the inputs.
        event: the recorded transform.
        cache: input chains already read (filled on demand).

    Returns:
        ``None`` when every recorded input block is in its local chain, else a reason.
    """
    cache = {} if cache is None else cache
    for qi in event.query_inputs:
        did = qi.dataset_id
        if did not in cache:
            cache[did] = _chain_hashes(ws, did)
        held = cache[did]
        if held is None:
            return f"input {did} is not in this workspace"
        for h in (qi.prev_block_hash, qi.new_block_hash):
            if h is not None and h not in held:
                return f"input {did} block {h} is not held yet"
    return None


# -- the validator -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidationRun:
    """Result of `Validator.validate` for one dataset.

    Attributes:
        alias / dataset_id / head: the dataset and the head checked up to.
        attestations: the attestations signed in this run, oldest block first.
        backlog: data blocks still without an attestation of this validator.
        waiting: why the run stopped early with ``wait_for_inputs`` (an input block not
            held yet), else ``None``.
    """

    alias: str
    dataset_id: DatasetId
    head: Multihash | None
    attestations: tuple[Attestation, ...]
    backlog: int
    waiting: str | None = None

    def count(self, verdict: Verdict) -> int:
        """How many attestations of this run have ``verdict``."""
        return sum(1 for a in self.attestations if a.verdict is verdict)


@dataclass
class _Context:
    set_transform: SetTransform | None = None
    vocab: SetVocab | None = None
    schema: SetDataSchema | None = None


class Validator:
    """Checks data blocks of datasets in a workspace and signs attestations.

    Args:
        ws: the workspace holding the datasets (and the inputs of derivatives).
        keypair: the validator key (see `load_or_create_validator_key`).
        engine: the engine for replays (default: `node.engine_manager.get_engine`,
            started only when a derivative needs it).
        store: where attestations go (default: the workspace's store).
        engine_identity: the identity recorded in attestations (default:
            `engine.spark.engine_identity`).
    """

    def __init__(
        self,
        ws: Workspace,
        keypair: KeyPair,
        *,
        engine: EngineClient | None = None,
        store: AttestationStore | None = None,
        engine_identity: str | None = None,
    ) -> None:
        self.ws = ws
        self.keypair = keypair
        self._engine = engine
        self.store = store or AttestationStore.for_workspace(ws)
        if engine_identity is None:
            from engine.spark import engine_identity as current_identity

            engine_identity = current_identity()
        self.engine_identity = engine_identity

    @property
    def validator_id(self) -> DatasetId:
        """The validator's identity (its key)."""
        return self.keypair.dataset_id

    def _get_engine(self) -> EngineClient:
        if self._engine is None:
            from node.engine_manager import get_engine

            self._engine = get_engine(self.ws)
        return self._engine

    def _checked(self, dataset_id: DatasetId, *, retry: bool) -> set[Multihash]:
        done: set[Multihash] = set()
        for a in self.store.attestations(dataset_id):
            if a.validator != self.validator_id:
                continue
            if retry and a.verdict is Verdict.COULD_NOT_CHECK:
                continue
            done.add(a.block_hash)
        return done

    def unchecked_blocks(
        self, ref: str | DatasetId, *, retry_could_not_check: bool = False
    ) -> list[tuple[Multihash, int]]:
        """Data blocks without an attestation of this validator, oldest first.

        Raises:
            DatasetNotFound / InvalidAlias: no such dataset.
        """
        entry = self.ws.resolve(ref)
        ds = self.ws.get(entry.id)
        done = self._checked(entry.id, retry=retry_could_not_check)
        return [
            (h, b.sequence_number)
            for h, _raw, b in reversed(list(ds.iter_blocks()))
            if isinstance(b.event, AddData | ExecuteTransform) and h not in done
        ]

    def backlog(self, ref: str | DatasetId) -> int:
        """How many data blocks of ``ref`` this validator has not checked yet."""
        return len(self.unchecked_blocks(ref))

    def validate(
        self,
        ref: str | DatasetId,
        *,
        max_blocks: int | None = None,
        retry_could_not_check: bool = False,
        wait_for_inputs: bool = False,
        stop: threading.Event | None = None,
    ) -> ValidationRun:
        """Check the unchecked data blocks of ``ref`` (oldest first), sign and store verdicts.

        Args:
            ref: alias or DID.
            max_blocks: check at most this many blocks (the rest stays in the backlog).
            retry_could_not_check: check again blocks this validator could not check.
            wait_for_inputs: a derivative block whose recorded input blocks are not in
                the local input chains yet stops the run unsigned (`ValidationRun.waiting`
                says why) instead of being attested ``could-not-check``: a replicating
                validator gets them with the next pull.
            stop: set by the caller to end the run before its next block (the rest
                stays in the backlog; a stopping daemon waits for the block in hand).

        Raises:
            DatasetNotFound / InvalidAlias: no such dataset.
            engine.errors.EngineUnavailable / EngineInternalError: the engine failed
                (attestations made before the failure are stored).
        """
        entry = self.ws.resolve(ref)
        ds = self.ws.get(entry.id)
        head = ds.head()
        chain = [(h, b) for h, _raw, b in ds.iter_blocks()][::-1]
        done = self._checked(entry.id, retry=retry_could_not_check)
        todo = [
            h for h, b in chain if isinstance(b.event, AddData | ExecuteTransform) and h not in done
        ]
        if max_blocks is not None:
            todo = todo[: max(0, max_blocks)]
        wanted = set(todo)
        signed: list[Attestation] = []
        ctx = _Context()
        histories: InputHistories = {}
        input_chains: dict[DatasetId, set[Multihash] | None] = {}
        waiting: str | None = None
        for h, block in chain:
            event = block.event
            if isinstance(event, SetTransform):
                ctx.set_transform = event
            elif isinstance(event, SetVocab):
                ctx.vocab = event
            elif isinstance(event, SetDataSchema):
                ctx.schema = event
            if h not in wanted:
                continue
            if stop is not None and stop.is_set():
                break
            if wait_for_inputs and isinstance(event, ExecuteTransform):
                waiting = missing_input(self.ws, event, input_chains)
                if waiting is not None:
                    log.info("%s #%d: waiting: %s", entry.alias, block.sequence_number, waiting)
                    break
            verdict = self._check(ds, entry.alias, h, block, ctx, histories)
            attestation = self._sign_and_store(entry.id, entry.alias, verdict)
            if attestation is not None:
                signed.append(attestation)
        backlog = len(self.unchecked_blocks(entry.id))
        return ValidationRun(entry.alias, entry.id, head, tuple(signed), backlog, waiting)

    def _sign_and_store(
        self, did: DatasetId, alias: str, verdict: BlockVerdict
    ) -> Attestation | None:
        """Sign ``verdict`` and store it; ``None`` when this validator's is stored already."""
        attestation = sign_attestation(
            self.keypair,
            dataset_id=did,
            block_hash=verdict.block_hash,
            sequence_number=verdict.sequence_number,
            verdict=verdict.verdict,
            detail=verdict.detail,
            engine=self.engine_identity,
        )
        try:
            self.store.accept(attestation)
        except DuplicateAttestation:
            return None  # another run of this validator got there first
        log.info("%s #%d: %s %s", alias, verdict.sequence_number, verdict.verdict, verdict.detail)
        return attestation

    def _check(
        self,
        ds: Dataset,
        alias: str,
        h: Multihash,
        block: MetadataBlock,
        ctx: _Context,
        histories: InputHistories,
    ) -> BlockVerdict:
        from engine.errors import InvalidQuery
        from node.validation.replay import replay_transform_block

        seq = block.sequence_number
        problem = check_block_objects(ds, h, block)
        if problem is not None or not isinstance(block.event, ExecuteTransform):
            return problem or BlockVerdict(h, seq, Verdict.REPRODUCED)
        transform = None if ctx.set_transform is None else ctx.set_transform.transform
        if ctx.set_transform is None or not isinstance(transform, TransformSql):
            return BlockVerdict(
                h, seq, Verdict.COULD_NOT_CHECK, "no SQL transform in force at this block"
            )
        try:
            outcome = replay_transform_block(
                self.ws,
                ds,
                alias,
                h,
                block,
                set_transform=ctx.set_transform,
                vocab=ctx.vocab,
                schema=ctx.schema,
                engine=self._get_engine(),
                histories=histories,
            )
        except InputNotReady as e:
            return BlockVerdict(h, seq, Verdict.COULD_NOT_CHECK, _reason(f"missing input: {e}"))
        except InvalidQuery as e:  # raised outside the run (e.g. planning the request)
            return BlockVerdict(
                h, seq, Verdict.COULD_NOT_CHECK, _reason(f"engine refused the query: {e}")
            )
        m = outcome.mismatch
        if m is None:
            return BlockVerdict(h, seq, Verdict.REPRODUCED)
        if outcome.cause == "input":
            return BlockVerdict(
                h, seq, Verdict.COULD_NOT_CHECK, _reason(f"missing input: {m.replayed}")
            )
        if outcome.cause == "engine":
            return BlockVerdict(
                h, seq, Verdict.COULD_NOT_CHECK, _reason(f"engine refused the query: {m.replayed}")
            )
        warning = identity_warning(transform, self.engine_identity)
        if warning is not None:
            return BlockVerdict(
                h,
                seq,
                Verdict.COULD_NOT_CHECK,
                _reason(
                    f"engine identity differs (pinned {transform.version}, validator runs "
                    f"{self.engine_identity}); replay differs at {m.field}"
                ),
            )
        return BlockVerdict(h, seq, Verdict.DIVERGED, m.field)
