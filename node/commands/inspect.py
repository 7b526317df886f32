"""``odf inspect schema DS``: a dataset's data schema (ODF YAML, DDL or Arrow);
``odf inspect state [DS...]``: what each derivative's stream state keeps, and its size.

The state is shown here rather than in ``odf log``: the log lists the metadata chain,
block by block, as written; the state is the newest checkpoint's content, one answer per
derivative, read from the checkpoint (the engine's format) on request.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Final

from node.cli_util import EXIT_OK, add_output_format
from node.commands import dataset_view
from node.errors import UsageError
from node.render.output import OUTPUT_FORMATS

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SCHEMA_FORMATS", "cmd_inspect_schema", "cmd_inspect_state", "ddl_of", "register"]

SCHEMA_FORMATS: Final = ("odf-yaml", "ddl", "arrow")


def ddl_of(t: pa.DataType) -> str:
    """Render an Arrow type in the spec's DDL syntax (``BIGINT``, ``ARRAY<STRING>``...)."""
    import pyarrow as pa

    types = pa.types
    simple = [
        (types.is_int8, "TINYINT"),
        (types.is_int16, "SMALLINT"),
        (types.is_int32, "INT"),
        (types.is_int64, "BIGINT"),
        (types.is_uint8, "TINYINT UNSIGNED"),
        (types.is_uint16, "SMALLINT UNSIGNED"),
        (types.is_uint32, "INT UNSIGNED"),
        (types.is_uint64, "BIGINT UNSIGNED"),
        (types.is_float16, "HALF"),
        (types.is_float32, "FLOAT"),
        (types.is_float64, "DOUBLE"),
        (types.is_boolean, "BOOLEAN"),
        (types.is_date, "DATE"),
        (types.is_timestamp, "TIMESTAMP"),
        (types.is_null, "NULL"),
    ]
    for check, name in simple:
        if check(t):
            return name
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return "STRING"
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return "BINARY"
    if types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        return f"ARRAY<{ddl_of(t.value_type)}>"
    if types.is_map(t):
        return f"MAP<{ddl_of(t.key_type)}, {ddl_of(t.item_type)}>"
    if types.is_struct(t):
        inner = ", ".join(f"{_ddl_name(f.name)}: {ddl_of(f.type)}" for f in t)
        return f"STRUCT<{inner}>"
    return str(t).upper()


def _ddl_name(name: str) -> str:
    return name if name.isidentifier() else "`" + name.replace("`", "``") + "`"


def cmd_inspect_schema(args: argparse.Namespace) -> int:
    view = dataset_view(args)
    data_schema = view.data_schema()
    if data_schema is None:
        raise UsageError(f"dataset {args.dataset} has no schema yet (ingest data first)")
    if args.output_format == "odf-yaml":
        from fbs.manifest import to_plain
        from fbs.manifest.yamlio import dump_yaml

        sys.stdout.write(dump_yaml(to_plain(data_schema)))
    elif args.output_format == "arrow":
        print(view.schema().to_string(show_schema_metadata=False))
    else:
        for f in view.schema():
            null = "" if f.nullable else " NOT NULL"
            print(f"{_ddl_name(f.name)} {ddl_of(f.type)}{null}")
    return EXIT_OK


def cmd_inspect_state(args: argparse.Namespace) -> int:
    from engine.streaming.summary import summarize_checkpoint
    from fbs.model.enums import DatasetKind
    from node.cli_util import open_workspace
    from node.render.output import render
    from node.render.state import STATE_COLUMNS, state_row
    from storage.verified import verified_checkpoint_path

    ws = open_workspace(args)
    named = bool(args.datasets)
    refs = args.datasets or [e.alias for e in ws.list()]
    table = args.output_format == "table"
    rows = []
    for ref in refs:
        ds = ws.get(ref)
        state = ds.state()
        if state is None or state.kind != DatasetKind.Derivative:
            if named:
                raise UsageError(f"dataset {ref} is not a derivative: it keeps no stream state")
            continue
        summary = None
        if state.last_checkpoint is not None:
            root = ds.layout.checkpoints.root
            summary = summarize_checkpoint(verified_checkpoint_path(root, state.last_checkpoint))
        rows.append(state_row(ref, summary, table=table))
    if table:
        render(rows, "table", columns=list(STATE_COLUMNS))
    else:
        render(rows, args.output_format)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``inspect`` to the ``odf`` sub-parsers."""
    inspect = sub.add_parser("inspect", help="inspect a dataset")
    isub = inspect.add_subparsers(dest="inspect_command", required=True, metavar="COMMAND")
    p = isub.add_parser("schema", help="show a dataset's data schema")
    p.set_defaults(func=cmd_inspect_schema)
    p.add_argument("dataset", help="dataset alias or DID")
    add_output_format(p, SCHEMA_FORMATS, "ddl")
    p = isub.add_parser(
        "state", help="show what each derivative's stream state keeps, and its checkpoint size"
    )
    p.set_defaults(func=cmd_inspect_state)
    p.add_argument("datasets", nargs="*", help="derivatives (alias or DID; default: all)")
    add_output_format(p, OUTPUT_FORMATS, "table")
