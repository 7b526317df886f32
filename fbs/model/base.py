"""What every generated table class of `fbs.model` shares: immutability and pickling.

The table classes (written by ``scripts/gen-model`` from fbs/schema/odf.fbs) are plain
slotted classes with their own ``__init__``, ``__eq__``, ``__hash__``, ``__repr__`` and
``replace``; they behave as ``dataclass(frozen=True, slots=True, kw_only=True)`` would:

- assigning or deleting an attribute raises `dataclasses.FrozenInstanceError`;
- instances are equal when of the same class with equal fields, hashed on the fields;
- ``copy``, ``deepcopy`` and ``pickle`` rebuild an instance from its field values.

`Table` is marked as a dataclass transform so that type checkers treat the fields as
read-only and check keyword arguments; at run time that marker is a class attribute.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Any, Final, dataclass_transform

__all__ = ["KEEP", "Table", "set_field"]


class _Keep:
    """The default of ``replace`` arguments: keep the field's current value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "KEEP"


#: The default of ``replace`` arguments (typed ``Any`` so it fits every field's type).
KEEP: Final[Any] = _Keep()

#: Sets a slot of a frozen instance (what ``__init__`` uses).
set_field: Final = object.__setattr__


def _rebuild(cls: type[Table], state: dict[str, Any]) -> Table:
    """An instance of ``cls`` with ``state`` as its fields (unpickling, copying)."""
    value = object.__new__(cls)
    for name, item in state.items():
        set_field(value, name, item)
    return value


@dataclass_transform(frozen_default=True, kw_only_default=True)
class Table:
    """Base of the table classes: refuses writes, pickles by field values."""

    __slots__ = ()

    if not TYPE_CHECKING:  # type checkers see the fields as read-only instead

        def __setattr__(self, name: str, value: object) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        names: tuple[str, ...] = type(self).__slots__
        return _rebuild, (type(self), {name: getattr(self, name) for name in names})
