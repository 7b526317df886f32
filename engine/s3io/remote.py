"""An engine client whose requests read chosen inputs' slices from S3.

A node whose input dataset is also held on S3 (pushed there: kamu's layout, objects
named by their hash under ``<prefix>/data/``) names that input's slices to the engine by
their exact keys on S3 instead of its own files: the slices the node listed from the
input's metadata, each by the hash its block gives it. Executors then read nothing of the
node's disk, and the engine checks every object against that hash before reading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath

from engine.client import DEFAULT_CALL_TIMEOUT, EngineClient
from engine.errors import EngineInternalError
from engine.transform import TransformResult
from fbs.did import DatasetId
from fbs.errors import OdfError
from fbs.model.engine import TransformRequest, TransformRequestInput
from fbs.multiformats import SHA3_256, parse_hash
from storage.layout import DATA_DIR
from storage.s3.url import S3Location

__all__ = ["S3InputsClient", "on_s3"]


def _on_s3(inp: TransformRequestInput, location: S3Location) -> TransformRequestInput:
    urls = []
    for path in inp.data_paths:
        name = PurePath(path).name
        try:
            h = parse_hash(name, code=SHA3_256)
        except OdfError:
            raise EngineInternalError(
                f"input {inp.query_alias!r}: {path} is not named by its hash"
            ) from None
        urls.append(location.child(f"{DATA_DIR}/{h.to_multibase()}").to_url())
    return inp.replace(data_paths=tuple(urls))


def on_s3(request: TransformRequest, inputs: Mapping[DatasetId, S3Location]) -> TransformRequest:
    """``request`` with the slices of the inputs in ``inputs`` named by their S3 URLs.

    Raises:
        EngineInternalError: a slice path not named by a SHA3-256 multihash.
    """
    return request.replace(
        query_inputs=tuple(
            _on_s3(inp, inputs[inp.dataset_id]) if inp.dataset_id in inputs else inp
            for inp in request.query_inputs
        )
    )


class S3InputsClient(EngineClient):
    """An `EngineClient` sending every transform through `on_s3` with ``inputs``: the
    S3 location (a dataset's prefix) of each input dataset held there."""

    def __init__(
        self,
        address: str,
        inputs: Mapping[DatasetId, S3Location],
        *,
        timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        super().__init__(address, timeout=timeout)
        self.inputs = dict(inputs)

    def execute_transform(
        self, request: TransformRequest, *, timeout: float | None = None
    ) -> TransformResult:
        """See `EngineClient.execute_transform`; the inputs on S3 are read from there."""
        return super().execute_transform(on_s3(request, self.inputs), timeout=timeout)
