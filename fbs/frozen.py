"""Frozen slotted dataclasses whose methods are compiled ahead of time (issue 15).

``@dataclass(frozen=True, slots=True, ...)`` writes up to ten methods per class as source
text and compiles them with ``exec`` at every import: ~0.7 ms a class, ~75 % of
``import fbs.model`` for its ~110 classes. ``scripts/gen-model`` writes the same methods
ahead of time into `fbs._frozen_methods`, a module compiled to bytecode once like any
other; the decorators here build each class from them, with the `dataclasses.Field`
objects, ``__slots__`` (a new class, as ``slots=True`` makes), ``__match_args__``,
``__dataclass_params__`` and the pickling methods of a slotted frozen dataclass:

- `model`: ``dataclass(frozen=True, slots=True, kw_only=True)`` (the schema tables);
- `positional_model`: ``dataclass(frozen=True, slots=True)``;
- `ordered_model`: ``dataclass(frozen=True, slots=True, order=True)``.

The classes are those dataclasses: frozen (assignment and deletion raise
`dataclasses.FrozenInstanceError`), slotted, equal by value between instances of one
class, hashed on their compared fields, with the dataclass repr (unless the class
writes its own ``__init__``, ``__repr__`` or ``__eq__``, kept as dataclasses keeps
them) and ``__post_init__`` call, picklable; `dataclasses.fields`, ``replace``,
``asdict`` and ``is_dataclass`` work on them. The generated text is that of Python
3.11's `dataclasses`; on any other version the decorators are the real ``dataclass``.

``tests/fbs/test_frozen.py`` compares every such class with the real dataclass of its
own class statement, and checks that the generated module is what ``scripts/gen-model``
writes now.
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast, dataclass_transform

from fbs import _frozen_methods

__all__ = ["PRECOMPILED", "model", "ordered_model", "positional_model"]

_C = TypeVar("_C", bound=type)

#: False where the generated text is not that of this Python's `dataclasses`.
PRECOMPILED = sys.version_info[:2] == (3, 11)

# What 3.11's dataclass records (init, repr, eq, order, unsafe_hash, frozen); `dataclasses`
# has no public constructor for it. The test compares them with real dataclasses' ones.
_PARAMS: dict[bool, Any] = (
    {
        order: dataclasses._DataclassParams(  # type: ignore[attr-defined]
            True, True, True, order, False, True
        )
        for order in (False, True)
    }
    if PRECOMPILED
    else {}
)
_FIELD = getattr(dataclasses, "_FIELD", None)  # the marker `dataclasses.fields` selects on


def _getstate(self: Any) -> list[Any]:
    # Pickling and copying a slotted frozen class: values in field order, as dataclasses does.
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


def _fields(cls: type, ns: dict[str, Any], kw_only: bool) -> dict[str, dataclasses.Field[Any]]:
    """The `dataclasses.Field` of each annotation, as `dataclasses` makes them."""
    annotations = ns.get("__annotations__", {})
    fields: dict[str, dataclasses.Field[Any]] = {}
    for name, annotation in annotations.items():
        default = ns.pop(name, dataclasses.MISSING)
        f: dataclasses.Field[Any] = (
            default
            if isinstance(default, dataclasses.Field)
            else dataclasses.field(default=default)
        )
        if f.default.__class__.__hash__ is None:
            raise ValueError(
                f"mutable default {type(f.default)} for field {name} is not allowed: "
                "use default_factory"
            )
        if f.kw_only is dataclasses.MISSING:
            f.kw_only = kw_only
        f.name = name
        f.type = annotation
        f._field_type = _FIELD  # type: ignore[attr-defined]
        fields[name] = f
    return fields


def _build(cls: type, kw_only: bool, order: bool) -> type:
    """The slotted frozen dataclass made of ``cls`` and its generated methods."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    ns = dict(cls.__dict__)
    fields = _fields(cls, ns, kw_only)
    entry = _frozen_methods.METHODS.get(key)
    if entry is None or entry[0] != (tuple(fields), kw_only, order):
        raise TypeError(f"{key}: generated methods missing or stale: run scripts/gen-model")
    ns["__dataclass_params__"] = _PARAMS[order]
    ns["__dataclass_fields__"] = fields
    if "__match_args__" not in ns:
        ns["__match_args__"] = tuple(n for n, f in fields.items() if f.init and not f.kw_only)
    defaults = {n: f.default for n, f in fields.items() if f.default is not dataclasses.MISSING}
    factory: Callable[[type, dict[str, Any]], dict[str, Any]] = entry[1]
    # The methods bind the class as given, before slots, as 3.11's dataclass does.
    for name, fn in factory(cls, defaults).items():
        if name in ns:
            raise TypeError(f"{key} defines {name}: run scripts/gen-model")
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        fn.__module__ = cls.__module__
        ns[name] = reprlib.recursive_repr()(fn) if name == "__repr__" else fn
    ns["__slots__"] = tuple(fields)
    ns.pop("__dict__", None)
    ns.pop("__weakref__", None)
    ns.setdefault("__getstate__", _getstate)
    ns.setdefault("__setstate__", _setstate)
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
        TypeError: if `fbs._frozen_methods` has no methods for ``cls`` or was generated
            for another class statement (run ``scripts/gen-model``).
    """
    if not PRECOMPILED:
        return cast(_C, dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls))
    return cast(_C, _build(cls, kw_only=True, order=False))


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def positional_model(cls: _C) -> _C:
    """``dataclass(frozen=True, slots=True)`` from pre-compiled methods.

    Raises:
        TypeError: as `model`.
    """
    if not PRECOMPILED:
        return cast(_C, dataclasses.dataclass(frozen=True, slots=True)(cls))
    return cast(_C, _build(cls, kw_only=False, order=False))


@dataclass_transform(
    frozen_default=True,
    order_default=True,
    field_specifiers=(dataclasses.field, dataclasses.Field),
)
def ordered_model(cls: _C) -> _C:
    """``dataclass(frozen=True, slots=True, order=True)`` from pre-compiled methods.

    Raises:
        TypeError: as `model`.
    """
    if not PRECOMPILED:
        return cast(_C, dataclasses.dataclass(frozen=True, slots=True, order=True)(cls))
    return cast(_C, _build(cls, kw_only=False, order=True))
