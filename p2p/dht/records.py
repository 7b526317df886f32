"""Signed head records in the DHT: which bytes a node stores, and which record wins.

`HeadRecordValidator` is the ``/odf-head/`` namespace validator every odf DHT node runs
on values it is asked to store and on values it reads:

* ``validate``: at most `MAX_HEAD_RECORD_BYTES`, a `p2p.head_record.HeadRecord` whose
  signature verifies against its own DID, stored under that DID's key
  (`p2p.dht.keys.head_key`). Anything else is refused before it is stored.
* ``select``: the highest sequence number wins (a lower one is a rollback or a replay).
  Between records of one sequence number with different heads, the first (the one
  held) is kept, and the pair is passed to ``on_equivocation``, as
  `p2p.head_store.HeadStore` does for gossip: both are valid signatures by the
  dataset's key, so the pair is evidence against its publisher, and serving the
  newcomer instead would let anyone holding the key flip readers between forks.

py-libp2p calls ``select(key, [held, offered])`` on a PUT (index 0 keeps the held
record, and the put is not acknowledged) and ``select(key, [offered, held])`` on a local
`KadDHT.put_value` (index other than 0 refuses it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from libp2p.records.validator import Validator

from p2p.dht.keys import head_key
from p2p.errors import InvalidHeadRecord
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord

__all__ = ["EquivocationSink", "HeadRecordValidator", "best_record", "parse_head_value"]

#: Called with (held, offered): two valid records, one sequence number, two heads.
EquivocationSink = Callable[[HeadRecord, HeadRecord], None]

_NO_RECORD: Final = -1


def parse_head_value(key: str, value: bytes) -> HeadRecord:
    """The verified head record ``value`` holds, if it belongs under ``key``.

    Raises:
        InvalidHeadRecord: too large, malformed, a bad signature, or another dataset's key.
    """
    if not isinstance(value, bytes) or len(value) > MAX_HEAD_RECORD_BYTES:
        raise InvalidHeadRecord("head record value missing or too large")
    record = HeadRecord.from_json(value)  # verifies the signature against the DID
    if head_key(record.dataset_id) != key:
        raise InvalidHeadRecord(f"a record of {record.dataset_id} offered under another key")
    return record


def best_record(records: list[HeadRecord], on_equivocation: EquivocationSink | None = None) -> int:
    """Index of the record to keep: the highest sequence number, the earliest on a tie.

    Every later record with the winner's sequence number and another head is reported
    to ``on_equivocation`` with the winner. Returns -1 for an empty list.
    """
    best = _NO_RECORD
    for i, rec in enumerate(records):
        if best == _NO_RECORD or rec.sequence_number > records[best].sequence_number:
            best = i
    if best == _NO_RECORD or on_equivocation is None:
        return best
    winner = records[best]
    for rec in records[best + 1 :]:
        if rec.sequence_number == winner.sequence_number and rec.head != winner.head:
            on_equivocation(winner, rec)
    return best


class HeadRecordValidator(Validator):
    """The ``/odf-head/`` validator (see the module docstring).

    Args:
        on_equivocation: where same-sequence, different-head pairs go (``None``: dropped).
    """

    def __init__(self, on_equivocation: EquivocationSink | None = None) -> None:
        self._on_equivocation = on_equivocation

    def validate(self, key: str, value: bytes) -> None:
        """Refuse anything but a verified head record stored under its dataset's key.

        Raises:
            InvalidHeadRecord: see `parse_head_value`.
        """
        parse_head_value(key, value)

    def select(self, key: str, values: list[bytes]) -> int:
        """Index of the best of ``values`` (all validated before; see `best_record`).

        Raises:
            InvalidHeadRecord: a value that does not validate (py-libp2p then refuses
                the put).
        """
        records = [parse_head_value(key, v) for v in values]
        return best_record(records, self._on_equivocation)
