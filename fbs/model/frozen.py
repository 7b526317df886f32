"""`model` and `positional_model`: frozen dataclasses whose methods are compiled ahead of time.

``@dataclass(frozen=True, slots=True, kw_only=True)`` writes six methods per class as
source text and compiles them with ``exec`` at every import: ~0.7 ms a class, ~75 % of
``import fbs.model`` for its ~100 tables (issue 15). ``scripts/gen-model`` writes the
same methods ahead of time into `fbs.model._generated_methods`, a module compiled to
bytecode once like any other; these decorators build the class from them: the
`dataclasses.Field` objects, ``__slots__`` (a new class, as ``slots=True`` makes),
``__match_args__``, ``__dataclass_params__`` and the pickling methods of a slotted frozen
dataclass.

`model` is ``dataclass(frozen=True, slots=True, kw_only=True)``, `positional_model` is
``dataclass(frozen=True, slots=True)``: the classes are frozen (assignment and deletion
raise `dataclasses.FrozenInstanceError`), slotted, equal by value between instances of
one class, hashed on their compared fields, with the dataclass repr, picklable, and
`dataclasses.fields`, ``replace``, ``asdict`` and ``is_dataclass`` work on them. The
generated text is that of Python 3.11's `dataclasses`; on any other version both
decorators are the real ``dataclass`` (slower, same classes).

``tests/fbs/test_model_frozen.py`` compares every such class with a real dataclass of
the same fields, and checks that the generated module is what ``scripts/gen-model``
writes now.
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast, dataclass_transform

from fbs.model import _generated_methods

__all__ = ["GENERATED_METHODS", "model", "positional_model"]

_C = TypeVar("_C", bound=type)

#: The methods each generated factory returns, in its order.
GENERATED_METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")

#: False where the generated text does not match this Python's `dataclasses`.
PRECOMPILED = sys.version_info[:2] == (3, 11)

# What ``dataclass(frozen=True, ...)`` records in 3.11: init, repr, eq, order, unsafe_hash,
# frozen. `dataclasses` has no public constructor for it; the test compares the values.
_PARAMS = (
    dataclasses._DataclassParams(True, True, True, False, False, True)  # type: ignore[attr-defined]
    if PRECOMPILED
    else None
)
_FIELD = getattr(dataclasses, "_FIELD", None)  # the marker `dataclasses.fields` selects on


def _getstate(self: Any) -> list[Any]:
    # Pickling and copying a slotted frozen class: values in field order, as dataclasses does.
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


def _build(cls: type, kw_only: bool) -> type:
    """The slotted frozen dataclass made of ``cls`` and its generated methods."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    ns = dict(cls.__dict__)
    annotations = ns.get("__annotations__", {})
    names = tuple(annotations)
    entry = _generated_methods.METHODS.get(key)
    if entry is None or entry[0] != names:
        raise TypeError(f"{key}: generated methods missing or stale: run scripts/gen-model")
    fields: dict[str, dataclasses.Field[Any]] = {}
    for name in names:
        default = ns.pop(name, dataclasses.MISSING)
        f: dataclasses.Field[Any] = (
            default
            if isinstance(default, dataclasses.Field)
            else dataclasses.field(default=default)
        )
        if f.kw_only is dataclasses.MISSING:
            f.kw_only = kw_only
        f.name = name
        f.type = annotations[name]
        f._field_type = _FIELD  # type: ignore[attr-defined]
        fields[name] = f
    ns["__dataclass_params__"] = _PARAMS
    ns["__dataclass_fields__"] = fields
    if "__match_args__" not in ns:
        ns["__match_args__"] = tuple(n for n, f in fields.items() if f.init and not f.kw_only)
    # The methods bind the class as given, before slots, as 3.11's dataclass does.
    factory: Callable[[type], tuple[Any, ...]] = entry[1]
    for name, fn in zip(GENERATED_METHODS, factory(cls), strict=True):
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        fn.__module__ = cls.__module__
        ns[name] = reprlib.recursive_repr()(fn) if name == "__repr__" else fn
    ns["__slots__"] = names
    ns.pop("__dict__", None)
    ns.pop("__weakref__", None)
    ns["__getstate__"] = _getstate
    ns["__setstate__"] = _setstate
    new = type(cls)(cls.__name__, cls.__bases__, ns)
    new.__qualname__ = cls.__qualname__
    return new


@dataclass_transform(
    frozen_default=True,
    kw_only_default=True,
    field_specifiers=(dataclasses.field, dataclasses.Field),
)
def model(cls: _C) -> _C:
    """``dataclass(frozen=True, slots=True, kw_only=True)`` from pre-compiled methods.

    Raises:
        TypeError: if `fbs.model._generated_methods` has no methods for ``cls`` or
            was generated for other fields (run ``scripts/gen-model``).
    """
    if not PRECOMPILED:
        return cast(_C, dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls))
    return cast(_C, _build(cls, kw_only=True))


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def positional_model(cls: _C) -> _C:
    """``dataclass(frozen=True, slots=True)`` from pre-compiled methods.

    Raises:
        TypeError: as `model`.
    """
    if not PRECOMPILED:
        return cast(_C, dataclasses.dataclass(frozen=True, slots=True)(cls))
    return cast(_C, _build(cls, kw_only=False))
