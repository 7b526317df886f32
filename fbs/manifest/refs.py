"""Dataset references of transform inputs in kamu's canonical form.

A ``TransformInput.datasetRef`` is a *local* reference: a DID (``did:odf:<multibase>``;
``did:key:`` is accepted too) or an alias ``[account/]name``. kamu parses it before it
writes a block, so every spelling of the same reference gives the same bytes:

- a DID is written as ``did:odf:f<lowercase hex>``, whatever multibase it was given in
  (``z6Mk…`` base58btc, ``F…`` upper-case hex, ``u…`` base64url);
- an alias keeps the spelling it was written with (names compare case-insensitively, but
  kamu keeps the original text);
- an input without ``alias`` gets the reference's text as alias (``foo``,
  ``alice/foo``, or the canonical DID), which is the table name its SQL uses.

Resolving the reference to the dataset's ID (the ``datasetRef`` a block finally holds)
needs the workspace and happens when the dataset is added. Pure: no I/O.
"""

from __future__ import annotations

from fbs.did import DID_KEY_PREFIX, DID_ODF_PREFIX, DatasetAlias, DatasetId
from fbs.errors import InvalidDid, InvalidName, ManifestFieldError
from fbs.model import DatasetSnapshot, SetTransform, TransformInput

__all__ = [
    "LocalRef",
    "canonical_input",
    "canonical_ref_text",
    "canonicalize_snapshot",
    "parse_local_ref",
]

LocalRef = DatasetId | DatasetAlias


def parse_local_ref(text: str) -> LocalRef:
    """Parse a local dataset reference: a DID or ``[account/]name``.

    Raises:
        InvalidDid: a ``did:odf:`` / ``did:key:`` reference with a bad key.
        InvalidName: anything else that is not ``name`` or ``account/name``.
    """
    if not isinstance(text, str):
        raise InvalidName(f"a dataset reference must be a string, got {type(text).__name__}")
    if text.startswith((DID_ODF_PREFIX, DID_KEY_PREFIX)):
        return DatasetId.from_did(text)
    return DatasetAlias.parse(text)


def canonical_ref_text(ref: LocalRef) -> str:
    """kamu's text of a reference: ``did:odf:f…`` for an ID, the alias as written."""
    if isinstance(ref, DatasetId):
        return ref.to_did_odf()
    return str(ref)


def canonical_input(item: TransformInput, path: str = "") -> TransformInput:
    """The input with its reference in canonical text and its alias filled in.

    Raises:
        ManifestFieldError: the reference is not a local reference (``path.datasetRef``).
    """
    try:
        ref = parse_local_ref(item.dataset_ref)
    except (InvalidDid, InvalidName) as e:
        raise ManifestFieldError(
            f"{path}.datasetRef" if path else "datasetRef",
            f"{e} (a transform input is a did:odf:… DID or [account/]name)",
        ) from None
    text = canonical_ref_text(ref)
    return TransformInput(dataset_ref=text, alias=item.alias if item.alias is not None else text)


def canonicalize_snapshot(snapshot: DatasetSnapshot) -> DatasetSnapshot:
    """The snapshot with every transform input in canonical form (see `canonical_input`).

    Raises:
        ManifestFieldError: an input that is not a local reference, naming its place
            (``content.metadata[0].inputs[1].datasetRef``).
    """
    events = []
    for i, event in enumerate(snapshot.metadata):
        if isinstance(event, SetTransform):
            path = f"content.metadata[{i}].inputs"
            inputs = tuple(
                canonical_input(item, f"{path}[{j}]") for j, item in enumerate(event.inputs)
            )
            event = event.replace(inputs=inputs)
        events.append(event)
    return snapshot.replace(metadata=tuple(events))
