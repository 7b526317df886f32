"""Merge strategies (RFC-015 changelog model) as pure functions over Arrow tables.

`merge(strategy, new, existing, vocab=...)` turns one batch of new input rows into the
changelog rows to append: a table whose first column is the operation type (``op``,
Int32: 0 ``+A`` append, 1 ``-R`` retract, 2 ``-C`` correct-from, 3 ``+C`` correct-to)
followed by the data columns of ``new`` (event time included) in ``new``'s order. The
writer adds ``offset`` and ``system_time``.

``existing`` is the dataset's changelog so far (its ``offset`` and ``op`` columns plus the
data columns; only `required_columns` are needed) or ``None`` for an empty dataset. The
current state by key is derived from it with vectorized group-by/joins (`current_state`):
for each key the row with the highest offset, live if its op is ``+A`` or ``+C``.

Strategies and their documented choices:

- `MergeStrategyAppend`: every row is ``+A``; the input must not carry an ``op`` column.
- `MergeStrategyLedger`: rows whose primary key occurs anywhere in the dataset (any op)
  are skipped; duplicates inside one batch keep the first occurrence.
- `MergeStrategySnapshot`: the batch is a full snapshot. New keys → ``+A``; keys of the
  current state missing from the snapshot → ``-R`` (old values); keys whose
  ``compareColumns`` (default: every data column except the primary key and the event
  time) differ → ``-C`` (old values) immediately followed by ``+C`` (new values).
  Duplicate keys inside one snapshot are refused with `MergeError` naming the key.
- `MergeStrategyChangelogStream`: the input carries ``op``; validated (codes 0-3, no
  nulls, every ``-C`` immediately followed by a ``+C`` of the same key and every ``+C``
  preceded by a ``-C``) and passed through unchanged.
- `MergeStrategyUpsertStream`: the input may carry ``op`` where 0 = upsert and
  1 = delete (absent: all upserts). Duplicate keys in one batch: the **last** row of each
  key wins (earlier ones are dropped). Resolved against the current state: insert →
  ``+A``; update → ``-C`` old / ``+C`` new (an update identical in every column is
  dropped); delete of an existing key → ``-R`` with the old values; delete of a missing
  key → dropped.

Null key values are ordinary values: two nulls in the same key column are equal (as in
SQL ``GROUP BY``, unlike SQL joins).

Output order (deterministic, independent of thread scheduling):

- Append / Ledger / ChangelogStream: input order.
- Snapshot: first all ``-R`` rows in order of the retracted rows' offsets, then, in
  snapshot row order, ``+A`` rows and ``-C``/``+C`` pairs.
- Upsert: in input order of the winning rows; an update yields its ``-C``/``+C`` pair at
  that position.
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from fbs.model import (
    DatasetVocabulary,
    MergeStrategy,
    MergeStrategyAppend,
    MergeStrategyChangelogStream,
    MergeStrategyLedger,
    MergeStrategySnapshot,
    MergeStrategyUpsertStream,
)
from node.ingest.errors import MergeError

#: The default system column names.
DEFAULT_VOCAB: Final = DatasetVocabulary()

__all__ = [
    "DEFAULT_VOCAB",
    "OP_APPEND",
    "OP_CORRECT_FROM",
    "OP_CORRECT_TO",
    "OP_RETRACT",
    "UPSERT_DELETE",
    "UPSERT_UPSERT",
    "current_state",
    "merge",
    "primary_key_of",
    "required_columns",
]

OP_APPEND: Final = 0
OP_RETRACT: Final = 1
OP_CORRECT_FROM: Final = 2
OP_CORRECT_TO: Final = 3
#: ``op`` values accepted in UpsertStream input.
UPSERT_UPSERT: Final = 0
UPSERT_DELETE: Final = 1
#: How many offending key values an error message shows.
MAX_KEYS_IN_ERROR: Final = 3

_ROW: Final = "__odf_row"
_SORT: Final = "__odf_sort"
_OLD_ROW: Final = "__odf_old_row"
_NEW_ROW: Final = "__odf_new_row"
_IN_ROW: Final = "__odf_in_row"
_NULL_SUFFIX: Final = "__odf_isnull"


def primary_key_of(strategy: MergeStrategy) -> tuple[str, ...] | None:
    """The primary key of a keyed strategy (``None`` for Append)."""
    if isinstance(strategy, MergeStrategyAppend):
        return None
    return tuple(strategy.primary_key)


def required_columns(
    strategy: MergeStrategy, vocab: DatasetVocabulary = DEFAULT_VOCAB
) -> list[str] | None:
    """Columns of the existing changelog that `merge` needs.

    Returns ``[]`` when the strategy ignores existing data (Append, ChangelogStream),
    the key columns plus ``offset`` for Ledger, and ``None`` (all columns) otherwise.
    """
    if isinstance(strategy, MergeStrategyAppend | MergeStrategyChangelogStream):
        return []
    if isinstance(strategy, MergeStrategyLedger):
        return [vocab.offset_column, *strategy.primary_key]
    return None


def merge(
    strategy: MergeStrategy,
    new: pa.Table,
    existing: pa.Table | None,
    *,
    vocab: DatasetVocabulary = DEFAULT_VOCAB,
) -> pa.Table:
    """Changelog rows (``op`` + data columns) that merge ``new`` into the dataset.

    Args:
        strategy: the source's merge strategy.
        new: the new input rows (data columns, including the event time; for
            ChangelogStream and UpsertStream possibly the ``op`` column).
        existing: the dataset's changelog so far (``offset``, ``op`` and at least
            `required_columns`), or ``None`` if it has no data.
        vocab: system column names.

    Raises:
        MergeError: missing key columns, bad or missing ``op`` values, duplicate keys in
            a snapshot, key columns of an unsupported type.
    """
    op_col = vocab.operation_type_column
    if isinstance(strategy, MergeStrategyAppend):
        if op_col in new.column_names:
            raise MergeError(f"column {op_col!r} is reserved; Append input must not carry it")
        return _with_op(new, pa.array([OP_APPEND] * new.num_rows, pa.int32()), op_col)
    keys = list(strategy.primary_key)
    if not keys:
        raise MergeError(f"{type(strategy).__name__} needs a non-empty primary key")
    missing = [k for k in keys if k not in new.column_names]
    if missing:
        raise MergeError(f"primary key column(s) {missing} missing from the input")
    for k in keys:  # before any kernel meets a key type it has no kernel for
        _fill_value(new.column(k).type, k)
    if isinstance(strategy, MergeStrategyChangelogStream):
        return _changelog(new, keys, op_col)
    if op_col in new.column_names and not isinstance(strategy, MergeStrategyUpsertStream):
        raise MergeError(
            f"column {op_col!r} is reserved; {type(strategy).__name__} input must not carry it"
        )
    if isinstance(strategy, MergeStrategyLedger):
        return _ledger(new, existing, keys, vocab)
    if isinstance(strategy, MergeStrategySnapshot):
        compare = strategy.compare_columns
        return _snapshot(new, existing, keys, compare, vocab)
    if isinstance(strategy, MergeStrategyUpsertStream):
        return _upsert(new, existing, keys, vocab)
    raise MergeError(f"unsupported merge strategy {type(strategy).__name__}")


# -- state ----------------------------------------------------------------------------------


def current_state(
    changelog: pa.Table,
    primary_key: Sequence[str],
    *,
    vocab: DatasetVocabulary = DEFAULT_VOCAB,
) -> pa.Table:
    """Live rows of a keyed changelog: retractions and corrections applied.

    For every key the row with the highest offset is kept if its op is ``+A`` or ``+C``
    (a ``-R`` last means deleted). Result: the changelog's rows (all columns) in offset
    order.

    Raises:
        MergeError: key, ``offset`` or ``op`` columns missing.
    """
    off, op = vocab.offset_column, vocab.operation_type_column
    need = [off, op, *primary_key]
    missing = [c for c in need if c not in changelog.column_names]
    if missing:
        raise MergeError(f"changelog lacks column(s) {missing}")
    if changelog.num_rows == 0:
        return changelog
    last = (
        changelog.select([*primary_key, off])
        .group_by(list(primary_key), use_threads=False)
        .aggregate([(off, "max")])
        .column(f"{off}_max")
    )
    mask = pc.is_in(changelog.column(off), value_set=last)
    latest = changelog.filter(mask)
    live = pc.is_in(latest.column(op), value_set=pa.array([OP_APPEND, OP_CORRECT_TO], pa.int32()))
    out = latest.filter(live)
    return out.sort_by([(off, "ascending")])


# -- strategies -----------------------------------------------------------------------------


def _all(mask: pa.Array | pa.ChunkedArray) -> bool:
    """True when every value is true (also for an empty mask, where pc.all gives null)."""
    return pc.all(mask).as_py() is not False


def _with_op(data: pa.Table, ops: pa.Array, op_col: str) -> pa.Table:
    body = data.drop_columns([op_col]) if op_col in data.column_names else data
    return pa.table([ops, *body.columns], names=[op_col, *body.column_names])


def _indexed(table: pa.Table, name: str = _ROW) -> pa.Table:
    return table.append_column(name, pa.array(range(table.num_rows), pa.int64()))


def _changelog(new: pa.Table, keys: list[str], op_col: str) -> pa.Table:
    if op_col not in new.column_names:
        raise MergeError(f"ChangelogStream input must carry the {op_col!r} column")
    try:
        ops = pc.cast(new.column(op_col), pa.int32()).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise MergeError(f"column {op_col!r} is not an integer operation type: {e}") from None
    if ops.null_count:
        raise MergeError(f"column {op_col!r} has {ops.null_count} null value(s)")
    valid = pc.and_(pc.greater_equal(ops, 0), pc.less_equal(ops, OP_CORRECT_TO))
    if not _all(valid):
        bad = pc.indices_nonzero(pc.invert(valid))[0].as_py()
        raise MergeError(f"row {bad + 1}: {op_col!r} value {ops[bad].as_py()} is not in 0..3")
    n = len(ops)
    if n:
        is_from = pc.equal(ops, OP_CORRECT_FROM)
        is_to = pc.equal(ops, OP_CORRECT_TO)
        # next_is_to[i] = is_to[i+1]; prev_is_from[i] = is_from[i-1]
        next_is_to = pa.concat_arrays([is_to.slice(1), pa.array([False])])
        prev_is_from = pa.concat_arrays([pa.array([False]), is_from.slice(0, n - 1)])
        bad_from = pc.and_(is_from, pc.invert(next_is_to))
        bad_to = pc.and_(is_to, pc.invert(prev_is_from))
        if pc.any(bad_from).as_py():
            i = pc.indices_nonzero(bad_from)[0].as_py()
            raise MergeError(f"row {i + 1}: a -C (2) must be immediately followed by a +C (3)")
        if pc.any(bad_to).as_py():
            i = pc.indices_nonzero(bad_to)[0].as_py()
            raise MergeError(f"row {i + 1}: a +C (3) must immediately follow a -C (2)")
        froms = pc.indices_nonzero(is_from)
        if len(froms):
            tos = pc.add(froms, 1)
            for k in keys:
                col = new.column(k)
                a, b = col.take(froms), col.take(tos)
                same = pc.fill_null(pc.equal(a, b), False)
                both_null = pc.and_(pc.is_null(a), pc.is_null(b))
                ok = pc.or_(same, both_null)
                if not _all(ok):
                    i = froms[pc.indices_nonzero(pc.invert(ok))[0].as_py()].as_py()
                    raise MergeError(f"row {i + 1}: a -C/+C pair changes primary key column {k!r}")
    return _with_op(new, ops, op_col)


def _key_error(table: pa.Table, keys: list[str], what: str) -> MergeError:
    shown = table.select(keys).slice(0, MAX_KEYS_IN_ERROR).to_pylist()
    return MergeError(f"{what}: {', '.join(str(r) for r in shown)}")


def _fill_value(t: pa.DataType, column: str) -> pa.Scalar:
    """A non-null placeholder of type ``t`` (nulls are matched via a separate flag).

    Raises:
        MergeError: ``t`` cannot be a primary key type (nested values, ...).
    """
    types = pa.types
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return pa.scalar("", t)
    if types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t):
        return pa.scalar(b"", t)
    if types.is_fixed_size_binary(t):
        return pa.scalar(b"\0" * t.byte_width, t)
    if types.is_boolean(t):
        return pa.scalar(False, t)
    if types.is_decimal(t):
        return pa.scalar(decimal.Decimal(0), t)
    if types.is_date32(t) or types.is_time32(t):
        return pa.scalar(0, pa.int32()).cast(t)
    if types.is_integer(t) or types.is_floating(t) or types.is_temporal(t):
        return pa.scalar(0, pa.int64()).cast(t)
    raise MergeError(f"primary key column {column!r}: type {t} is not supported as a key")


def _join_keys(table: pa.Table, keys: list[str], prefix: str) -> tuple[pa.Table, list[str]]:
    """Add null-safe join key columns (value with nulls filled + is-null flag)."""
    names: list[str] = []
    for k in keys:
        col = table.column(k)
        filled = pc.fill_null(col, _fill_value(col.type, k))
        kn, nn = f"{prefix}{k}", f"{prefix}{k}{_NULL_SUFFIX}"
        table = table.append_column(kn, filled).append_column(nn, pc.is_null(col))
        names += [kn, nn]
    return table, names


def _match(
    left: pa.Table, right: pa.Table, keys: list[str], left_row: str, right_row: str
) -> pa.Table:
    """Pairs (left_row, right_row) of rows with equal keys (nulls equal), inner join."""
    lk, lnames = _join_keys(left.select([*keys, left_row]), keys, "__l_")
    rk, rnames = _join_keys(right.select([*keys, right_row]), keys, "__r_")
    joined = lk.select([*lnames, left_row]).join(
        rk.select([*rnames, right_row]),
        keys=lnames,
        right_keys=rnames,
        join_type="inner",
        use_threads=False,
    )
    return joined.select([left_row, right_row])


def _dedupe(table: pa.Table, keys: list[str], how: str) -> pa.Table:
    """Keep one row per key (``how`` = "min": first, "max": last), in input order."""
    idx = _indexed(table)
    chosen = (
        idx.select([*keys, _ROW])
        .group_by(keys, use_threads=False)
        .aggregate([(_ROW, how)])
        .column(f"{_ROW}_{how}")
    )
    kept = idx.filter(pc.is_in(idx.column(_ROW), value_set=chosen))
    return kept.drop_columns([_ROW])


def _ledger(
    new: pa.Table, existing: pa.Table | None, keys: list[str], vocab: DatasetVocabulary
) -> pa.Table:
    op_col = vocab.operation_type_column
    fresh = _dedupe(new, keys, "min")
    if existing is not None and existing.num_rows:
        missing = [k for k in keys if k not in existing.column_names]
        if missing:
            raise MergeError(f"existing data lacks primary key column(s) {missing}")
        seen = _unify(existing.select(keys), fresh.select(keys))
        n = _indexed(fresh, _NEW_ROW)
        o = _indexed(seen, _OLD_ROW)
        hits = _match(n, o, keys, _NEW_ROW, _OLD_ROW).column(_NEW_ROW)
        keep = pc.invert(pc.is_in(n.column(_NEW_ROW), value_set=hits))
        fresh = n.filter(keep).drop_columns([_NEW_ROW])
    return _with_op(fresh, pa.array([OP_APPEND] * fresh.num_rows, pa.int32()), op_col)


def _unify(old: pa.Table, like: pa.Table) -> pa.Table:
    """``old`` with ``like``'s columns (missing ones null) and types, in ``like``'s order."""
    cols = []
    for f in like.schema:
        if f.name in old.column_names:
            col = old.column(f.name)
            if col.type != f.type:
                try:
                    col = pc.cast(col, f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise MergeError(
                        f"column {f.name!r}: existing type {col.type} does not match {f.type}: {e}"
                    ) from None
            cols.append(col)
        else:
            cols.append(pa.nulls(old.num_rows, f.type))
    return pa.table(cols, schema=pa.schema([pa.field(f.name, f.type) for f in like.schema]))


def _state(
    existing: pa.Table | None, keys: list[str], data: pa.Table, vocab: DatasetVocabulary
) -> tuple[pa.Table, pa.Array]:
    """Current state rows (``data``'s columns) and their offsets."""
    if existing is None or existing.num_rows == 0:
        return data.slice(0, 0), pa.array([], pa.int64())
    live = current_state(existing, keys, vocab=vocab)
    offsets = live.column(vocab.offset_column).combine_chunks()
    return _unify(live, data), pc.cast(offsets, pa.int64())


def _not_equal(x: pa.ChunkedArray, y: pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Element-wise ``x != y``: Arrow's kernel, or for nested values (lists, structs,
    maps: Arrow has no comparison kernel for them) a comparison of their Python values,
    which are equal exactly when the nested values are (row by row: slower, and only
    for such columns)."""
    if not pa.types.is_nested(x.type):
        return pc.not_equal(x, y)
    pairs = zip(x.to_pylist(), y.to_pylist(), strict=True)
    return pa.array([u != v for u, v in pairs], pa.bool_())


def _rows_differ(a: pa.Table, b: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Row-wise "some column differs" (null == null) for equally long tables."""
    differ = pa.array([False] * a.num_rows, pa.bool_())
    for c in columns:
        x, y = a.column(c), b.column(c)
        ne = pc.fill_null(_not_equal(x, y), False)
        # Exactly one side null also counts as a difference.
        one_null = pc.xor(pc.is_null(x), pc.is_null(y))
        differ = pc.or_(differ, pc.or_(ne, one_null))
    return differ


def _assemble(parts: list[tuple[pa.Table, int, pa.Array]], op_col: str) -> pa.Table:
    """Concatenate (rows, op, sort key) parts and order by the sort key."""
    tables = []
    for rows, op, sort in parts:
        t = _with_op(rows, pa.array([op] * rows.num_rows, pa.int32()), op_col)
        tables.append(t.append_column(_SORT, pc.cast(sort, pa.int64())))
    out = pa.concat_tables(tables)
    return out.sort_by([(_SORT, "ascending")]).drop_columns([_SORT])


def _snapshot(
    new: pa.Table,
    existing: pa.Table | None,
    keys: list[str],
    compare: Sequence[str] | None,
    vocab: DatasetVocabulary,
) -> pa.Table:
    op_col = vocab.operation_type_column
    counts = new.select(keys).group_by(keys, use_threads=False).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        raise _key_error(dup, keys, "duplicate primary key(s) in one snapshot")
    if compare is None:
        skip = {*keys, vocab.event_time_column}
        compare = [c for c in new.column_names if c not in skip]
    else:
        missing = [c for c in compare if c not in new.column_names]
        if missing:
            raise MergeError(f"compare column(s) {missing} missing from the input")
    old, old_offsets = _state(existing, keys, new, vocab)
    n = _indexed(new, _NEW_ROW)
    o = _indexed(old, _OLD_ROW)
    pairs = _match(n, o, keys, _NEW_ROW, _OLD_ROW)
    new_idx, old_idx = pairs.column(_NEW_ROW), pairs.column(_OLD_ROW)
    added = pc.indices_nonzero(pc.invert(pc.is_in(n.column(_NEW_ROW), value_set=new_idx)))
    removed = pc.indices_nonzero(pc.invert(pc.is_in(o.column(_OLD_ROW), value_set=old_idx)))
    matched_new, matched_old = new.take(new_idx), old.take(old_idx)
    changed = _rows_differ(matched_new, matched_old, compare)
    ch_new = pc.filter(new_idx, changed)
    ch_old = pc.filter(old_idx, changed)
    # Sort keys: -R first by old offset (negative range), then 2*row (-C) / 2*row+1 (+C, +A).
    base = -(new.num_rows * 2 + 2) - old.num_rows
    removed_rank = pc.sort_indices(old_offsets.take(removed))
    removed_sorted = removed.take(removed_rank)
    return _assemble(
        [
            (
                old.take(removed_sorted),
                OP_RETRACT,
                pc.add(pa.array(range(len(removed_sorted)), pa.int64()), base),
            ),
            (old.take(ch_old), OP_CORRECT_FROM, pc.multiply(pc.cast(ch_new, pa.int64()), 2)),
            (
                new.take(ch_new),
                OP_CORRECT_TO,
                pc.add(pc.multiply(pc.cast(ch_new, pa.int64()), 2), 1),
            ),
            (
                new.take(added),
                OP_APPEND,
                pc.add(pc.multiply(pc.cast(added, pa.int64()), 2), 1),
            ),
        ],
        op_col,
    )


def _upsert(
    new: pa.Table, existing: pa.Table | None, keys: list[str], vocab: DatasetVocabulary
) -> pa.Table:
    op_col = vocab.operation_type_column
    if op_col in new.column_names:
        try:
            ops = pc.cast(new.column(op_col), pa.int32())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise MergeError(f"column {op_col!r} is not an integer: {e}") from None
        ok = pc.is_in(ops, value_set=pa.array([UPSERT_UPSERT, UPSERT_DELETE], pa.int32()))
        if not _all(pc.fill_null(ok, False)):
            i = pc.indices_nonzero(pc.invert(pc.fill_null(ok, False)))[0].as_py()
            raise MergeError(
                f"row {i + 1}: UpsertStream {op_col!r} must be 0 (upsert) or 1 (delete), "
                f"got {ops[i].as_py()}"
            )
        data = new.drop_columns([op_col])
    else:
        ops = pa.chunked_array([pa.array([UPSERT_UPSERT] * new.num_rows, pa.int32())])
        data = new
    flagged = _indexed(data.append_column(op_col, ops), _IN_ROW)
    # Last row per key wins: keep the maximal input row of each key.
    winners = _dedupe(flagged, keys, "max")
    rows = winners.column(_IN_ROW)
    is_delete = pc.equal(winners.column(op_col), UPSERT_DELETE)
    win_data = winners.drop_columns([op_col, _IN_ROW])
    old, _ = _state(existing, keys, win_data, vocab)
    w = _indexed(win_data, _NEW_ROW)
    o = _indexed(old, _OLD_ROW)
    pairs = _match(w, o, keys, _NEW_ROW, _OLD_ROW)
    w_idx, o_idx = pairs.column(_NEW_ROW), pairs.column(_OLD_ROW)
    exists = pc.is_in(w.column(_NEW_ROW), value_set=w_idx)
    # For matched winners, classify delete (-R) vs update (-C/+C if anything differs).
    m_delete = pc.take(is_delete, w_idx)
    m_differ = _rows_differ(win_data.take(w_idx), old.take(o_idx), win_data.column_names)
    retract = m_delete
    update = pc.and_(pc.invert(m_delete), m_differ)
    ins = pc.and_(pc.invert(exists), pc.invert(is_delete))
    ins_idx = pc.indices_nonzero(ins)
    sort_of = pc.cast(rows, pa.int64())
    r_w, r_o = pc.filter(w_idx, retract), pc.filter(o_idx, retract)
    u_w, u_o = pc.filter(w_idx, update), pc.filter(o_idx, update)
    return _assemble(
        [
            (old.take(r_o), OP_RETRACT, pc.multiply(sort_of.take(r_w), 2)),
            (old.take(u_o), OP_CORRECT_FROM, pc.multiply(sort_of.take(u_w), 2)),
            (
                win_data.take(u_w),
                OP_CORRECT_TO,
                pc.add(pc.multiply(sort_of.take(u_w), 2), 1),
            ),
            (win_data.take(ins_idx), OP_APPEND, pc.multiply(sort_of.take(ins_idx), 2)),
        ],
        op_col,
    )
