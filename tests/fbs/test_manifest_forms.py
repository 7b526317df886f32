"""Older and v0.39 resource manifest forms, multi-document streams, canonical references.

Each old form is checked against the current form it stands for: same snapshot, and the
same block bytes (hashed) for every event, so `odf add` writes the same chain.
"""

from __future__ import annotations

import textwrap

import pytest

from fbs.codec import block_hash, encode_block
from fbs.did import DatasetId
from fbs.errors import ManifestError, ManifestFieldError, ManifestLimitExceeded
from fbs.manifest import load_snapshot_yaml
from fbs.manifest.legacy import upgrade_snapshot_manifest
from fbs.manifest.refs import canonical_input, canonicalize_snapshot, parse_local_ref
from fbs.manifest.snapshots import LoadedSnapshot, load_snapshot_documents
from fbs.manifest.yamlio import parse_yaml_all
from fbs.model import DatasetSnapshot, MetadataBlock, TransformInput
from fbs.multiformats import Multihash, encode_multibase
from fbs.timestamp import Timestamp

DID = DatasetId.new_seeded(b"input")
DID_HEX = DID.to_did_odf()
DID_B58 = "did:odf:" + encode_multibase(DID.to_bytes(), "base58btc")


def snapshot_doc(body: str) -> str:
    """A DatasetSnapshot manifest with ``body`` (YAML lines under content)."""
    head = "kind: DatasetSnapshot\nversion: 1\ncontent:\n"
    return head + textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", "  ")


def load_one(text: str) -> LoadedSnapshot:
    (loaded,) = load_snapshot_documents(text)
    return loaded


def block_hashes(snapshot: DatasetSnapshot) -> list[Multihash]:
    """Hash of each event's block, with a fixed header (what `odf add` would write)."""
    prev = Multihash.sha3_256(b"seed")
    return [
        block_hash(
            encode_block(
                MetadataBlock(
                    system_time=Timestamp(0), prev_block_hash=prev, sequence_number=n, event=e
                )
            )
        )
        for n, e in enumerate(snapshot.metadata, start=1)
    ]


def assert_same_blocks(old: str, current: str) -> LoadedSnapshot:
    """``old`` reads as ``current`` (with notices), and writes the same blocks."""
    got = load_one(old)
    want = load_one(current)
    assert want.deprecations == ()
    assert got.deprecations, "an old form must be reported"
    assert got.snapshot == want.snapshot
    assert block_hashes(got.snapshot) == block_hashes(want.snapshot)
    return got


# -- the current form -------------------------------------------------------------------

CURRENT_ROOT = snapshot_doc(
    """
    name: weather
    kind: Root
    metadata:
      - kind: AddPushSource
        sourceName: default
        read:
          kind: NdJson
          ddlSchema: ["t TIMESTAMP", "v DOUBLE"]
        merge:
          kind: Append
      - kind: SetVocab
        eventTimeColumn: t
    """
)


def test_current_form_is_untouched_and_silent() -> None:
    loaded = load_one(CURRENT_ROOT)
    assert loaded.deprecations == ()
    assert loaded.snapshot == load_snapshot_yaml(CURRENT_ROOT)


def test_upgrade_returns_the_same_object_when_nothing_changes() -> None:
    (obj,) = parse_yaml_all(CURRENT_ROOT)
    assert upgrade_snapshot_manifest(obj) == (obj, ())


# -- pre-v0.38 read steps ---------------------------------------------------------------


def test_read_schema_ddl_list_is_ddl_schema() -> None:
    old = CURRENT_ROOT.replace("ddlSchema:", "schema:")
    got = assert_same_blocks(old, CURRENT_ROOT)
    assert [d.path for d in got.deprecations] == ["content.metadata[0].read.schema"]
    assert "ddlSchema" in str(got.deprecations[0])


def test_json_lines_is_nd_json() -> None:
    old = CURRENT_ROOT.replace("kind: NdJson", "kind: jsonLines\n        multiLine: false")
    got = assert_same_blocks(old, CURRENT_ROOT)
    assert [d.path for d in got.deprecations] == ["content.metadata[0].read.kind"]


@pytest.mark.parametrize("key", ["multiLine", "primitivesAsString"])
def test_json_lines_options_without_equivalent_are_refused(key: str) -> None:
    old = CURRENT_ROOT.replace("kind: NdJson", f"kind: JsonLines\n        {key}: true")
    with pytest.raises(ManifestFieldError) as e:
        load_one(old)
    assert e.value.path == f"content.metadata[0].read.{key}"


def test_old_and_new_schema_together_are_refused() -> None:
    old = CURRENT_ROOT.replace('ddlSchema: ["t TIMESTAMP", "v DOUBLE"]', 'schema: ["t TIMESTAMP"]')
    old = old.replace("kind: NdJson", 'kind: NdJson\n        ddlSchema: ["t TIMESTAMP"]')
    with pytest.raises(ManifestFieldError, match="not both"):
        load_one(old)


CSV_CURRENT = snapshot_doc(
    """
    name: cities
    kind: Root
    metadata:
      - kind: SetPollingSource
        fetch:
          kind: Url
          url: https://example.org/c.csv
        read:
          kind: Csv
          header: true
          ddlSchema: ["city STRING", "population BIGINT"]
        merge:
          kind: Snapshot
          primaryKey: [city]
    """
)


def test_removed_csv_and_snapshot_options_at_default_are_dropped() -> None:
    old = CSV_CURRENT.replace(
        "header: true", "header: true\n        enforceSchema: true\n        nanValue: NaN"
    ).replace("primaryKey: [city]", "primaryKey: [city]\n        obsvAdded: I")
    got = assert_same_blocks(old, CSV_CURRENT)
    assert {d.path.rsplit(".", 1)[-1] for d in got.deprecations} == {
        "enforceSchema",
        "nanValue",
        "obsvAdded",
    }


def test_removed_csv_option_not_at_default_is_refused() -> None:
    old = CSV_CURRENT.replace("header: true", "header: true\n        multiLine: true")
    with pytest.raises(ManifestFieldError) as e:
        load_one(old)
    assert e.value.path == "content.metadata[0].read.multiLine"


def test_push_source_source_is_source_name() -> None:
    old = CURRENT_ROOT.replace("sourceName: default", "source: default")
    got = assert_same_blocks(old, CURRENT_ROOT)
    assert [d.path for d in got.deprecations] == ["content.metadata[0].source"]


# -- pre-v0.34 transforms ---------------------------------------------------------------

CURRENT_DERIVED = snapshot_doc(
    f"""
    name: hot
    kind: Derivative
    metadata:
      - kind: SetTransform
        inputs:
          - datasetRef: weather
          - datasetRef: {DID_HEX}
            alias: other
        transform:
          kind: Sql
          engine: spark
          queries:
            - alias: tmp
              query: SELECT * FROM weather
            - query: SELECT * FROM tmp WHERE v > 30
    """
)


def test_input_names_and_output_alias_are_converted() -> None:
    old = snapshot_doc(
        f"""
        name: hot
        kind: Derivative
        metadata:
          - kind: setTransform
            inputs:
              - name: weather
              - id: {DID_HEX}
                name: other
            transform:
              kind: sql
              engine: spark
              queries:
                - alias: tmp
                  query: SELECT * FROM weather
                - alias: hot
                  query: SELECT * FROM tmp WHERE v > 30
        """
    )
    got = assert_same_blocks(old, CURRENT_DERIVED)
    assert [d.path for d in got.deprecations] == [
        "content.metadata[0].inputs[0].name",
        "content.metadata[0].inputs[1].id",
        "content.metadata[0].transform.queries[1].alias",
    ]


def test_input_name_with_dataset_ref_becomes_alias() -> None:
    old = CURRENT_DERIVED.replace(f"- datasetRef: {DID_HEX}\n", f"- datasetRef: {DID_HEX}\n")
    old = old.replace("alias: other", "name: other")
    assert_same_blocks(old, CURRENT_DERIVED)


def test_input_with_name_and_alias_is_refused() -> None:
    old = CURRENT_DERIVED.replace("alias: other", "alias: other\n          name: x")
    with pytest.raises(ManifestFieldError, match="not both"):
        load_one(old)


def test_an_aliased_last_query_that_is_not_the_dataset_is_kept() -> None:
    old = CURRENT_DERIVED.replace(
        "- query: SELECT * FROM tmp", "- alias: other.name\n            query: SELECT * FROM tmp"
    )
    loaded = load_one(old)
    assert loaded.deprecations == ()


# -- pre-v0.30 envelope -----------------------------------------------------------------


def test_api_version_and_content_id() -> None:
    old = CURRENT_ROOT.replace("version: 1", "apiVersion: 1").replace(
        "name: weather", "id: weather"
    )
    got = assert_same_blocks(old, CURRENT_ROOT)
    assert [d.path for d in got.deprecations] == ["apiVersion", "content.id"]


# -- RFC-018 resources (ODF v0.39) ------------------------------------------------------

RESOURCE = """\
$schema: https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset
headers:
  name: weather
  labels:
    team: climate
spec:
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: NdJson
        ddlSchema: ["t TIMESTAMP", "v DOUBLE"]
      merge:
        kind: Append
    - kind: SetVocab
      eventTimeColumn: t
"""


def test_resource_is_the_snapshot() -> None:
    got = assert_same_blocks(RESOURCE, CURRENT_ROOT)
    assert [d.path for d in got.deprecations] == ["$schema"]


def test_resource_account_prefixes_the_name() -> None:
    text = RESOURCE.replace("  name: weather", "  name: weather\n  account: alice")
    assert load_one(text).snapshot.name == "alice/weather"
    text = RESOURCE.replace("  name: weather", "  name: weather\n  account: {name: bob}")
    assert load_one(text).snapshot.name == "bob/weather"


def test_resource_volume_is_ignored_with_a_notice() -> None:
    text = RESOURCE.replace("spec:\n", "spec:\n  volume: my-bucket\n")
    got = assert_same_blocks(text, CURRENT_ROOT)
    assert "spec.volume" in [d.path for d in got.deprecations]


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (("dataset/v1alpha1/Dataset", "source/v1alpha1/Source"), "$schema"),
        (("spec:\n", f"spec:\n  did: {DID_HEX}\n"), "spec.did"),
        (("headers:\n", "headers:\n  color: red\n"), "headers.color"),
        (("spec:\n", "spec:\n  extra: 1\n"), "spec.extra"),
        (("  kind: Root\n", ""), "spec"),
        (("  name: weather\n", ""), "headers.name"),
        (("  name: weather\n", "  name: weather\n  account: [x]\n"), "headers.account"),
        (("$schema", "status: {}\nmore: 1\n$schema"), "more"),
    ],
)
def test_bad_resources_are_refused(edit: tuple[str, str], path: str) -> None:
    with pytest.raises(ManifestFieldError) as e:
        load_one(RESOURCE.replace(*edit, 1))
    assert e.value.path == path


# -- malformed in every version ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        CURRENT_ROOT.replace("kind: NdJson", "kind: JsonLine"),
        CURRENT_ROOT.replace("sourceName: default", "source: default\n      sourceName: x"),
        CURRENT_ROOT.replace("version: 1", "version: 2"),
        CURRENT_ROOT.replace("ddlSchema:", "schema: 5\n        ddl:"),
        "kind: DatasetSnapshot\nversion: 1\ncontent: []\n",
        "- 1\n- 2\n",
        "just text\n",
    ],
)
def test_malformed_everywhere_is_refused(text: str) -> None:
    with pytest.raises(ManifestError):
        load_one(text)


# -- streams ----------------------------------------------------------------------------


def test_multi_document_stream() -> None:
    text = CURRENT_ROOT + "---\n" + RESOURCE.replace("name: weather", "name: w2") + "---\n"
    docs = load_snapshot_documents(text)
    assert [d.snapshot.name for d in docs] == ["weather", "w2"]
    assert [d.document for d in docs] == [0, 1]


def test_a_bad_document_is_named() -> None:
    text = CURRENT_ROOT + "---\n" + CURRENT_ROOT.replace("kind: Root", "kind: Leaf")
    with pytest.raises(ManifestFieldError) as e:
        load_snapshot_documents(text)
    assert e.value.path.startswith("document 2: content.kind")


def test_empty_text_is_refused() -> None:
    with pytest.raises(ManifestError, match="empty"):
        load_snapshot_documents("# nothing\n")


def test_json_document() -> None:
    text = (
        '{"kind": "DatasetSnapshot", "version": 1,'
        ' "content": {"name": "x", "kind": "Root", "metadata": []}}'
    )
    assert load_one(text).snapshot.name == "x"


# -- canonical references ---------------------------------------------------------------


def derived_with_ref(ref: str, alias: str | None = None) -> str:
    alias_line = f"        alias: {alias}\n" if alias else ""
    return (
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: d\n  kind: Derivative\n"
        "  metadata:\n  - kind: SetTransform\n    inputs:\n"
        f"      - datasetRef: {ref}\n{alias_line}"
        "    transform: {kind: Sql, engine: spark, query: SELECT 1}\n"
    )


@pytest.mark.parametrize(
    "ref",
    [
        DID_B58,
        "did:odf:F" + DID.to_bytes().hex().upper(),
        "did:key:" + encode_multibase(DID.to_bytes(), "base58btc"),
        "did:odf:" + encode_multibase(DID.to_bytes(), "base64url"),
    ],
)
def test_every_did_spelling_is_written_as_kamu_does(ref: str) -> None:
    got = load_one(derived_with_ref(ref)).snapshot
    want = load_one(derived_with_ref(DID_HEX)).snapshot
    (item,) = got.metadata[0].inputs  # type: ignore[union-attr]
    assert item == TransformInput(dataset_ref=DID_HEX, alias=DID_HEX)
    assert block_hashes(got) == block_hashes(want)


def test_alias_references_keep_their_spelling() -> None:
    (item,) = load_one(derived_with_ref("Alice/Weather")).snapshot.metadata[0].inputs  # type: ignore[union-attr]
    assert item == TransformInput(dataset_ref="Alice/Weather", alias="Alice/Weather")
    (item,) = load_one(derived_with_ref("weather", "w")).snapshot.metadata[0].inputs  # type: ignore[union-attr]
    assert item == TransformInput(dataset_ref="weather", alias="w")


@pytest.mark.parametrize("ref", ["a/b/c", "repo/acc/name", "http://x/y", "did:odf:zzz", "a b"])
def test_non_local_references_are_refused(ref: str) -> None:
    with pytest.raises(ManifestFieldError) as e:
        load_one(derived_with_ref(f"'{ref}'"))
    assert e.value.path == "content.metadata[0].inputs[0].datasetRef"


def test_canonical_helpers() -> None:
    assert parse_local_ref(DID_B58) == DID
    assert canonical_input(TransformInput(dataset_ref=DID_B58)).dataset_ref == DID_HEX
    snap = DatasetSnapshot(name="x", kind=load_one(CURRENT_ROOT).snapshot.kind, metadata=())
    assert canonicalize_snapshot(snap) == snap


@pytest.mark.parametrize(
    "schema",
    ["https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset.json", "Dataset"],
)
def test_resource_schema_spellings(schema: str) -> None:
    text = "# a comment\n" + RESOURCE.replace(
        "https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset", schema
    )
    assert load_one(text).snapshot == load_one(CURRENT_ROOT).snapshot


def test_resource_with_uri_labels_and_no_metadata() -> None:
    text = (
        "$schema: https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset\n"
        "headers:\n  name: bobs-dataset\n  account: bob\n  labels:\n"
        "    https://opendatafabric.org/schemas/dataset/v1alpha1/AllowPublicRead: true\n"
        "spec:\n  kind: Root\n  metadata: []\n"
    )
    got = load_one(text).snapshot
    assert (got.name, got.metadata) == ("bob/bobs-dataset", ())


def test_stream_limits_apply_to_every_document() -> None:
    deep = "a: " + "[" * 80 + "]" * 80 + "\n"
    with pytest.raises(ManifestLimitExceeded):
        parse_yaml_all("a: 1\n---\n" + deep)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, k in zip("abcdef", "bcdefg", strict=True)
    )
    with pytest.raises(ManifestLimitExceeded):
        load_snapshot_documents("x: 1\n---\n" + bomb)


def test_flow_yaml_that_is_not_json_is_read_as_yaml() -> None:
    text = "{kind: DatasetSnapshot, version: 1, content: {name: x, kind: Root, metadata: []}}"
    assert load_one(text).snapshot.name == "x"
