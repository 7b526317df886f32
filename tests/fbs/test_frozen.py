"""`fbs.frozen`: classes built from pre-compiled methods behave as real dataclasses.

Each class decorated with ``@model``, ``@positional_model`` or ``@ordered_model`` is
compared with the class that ``dataclasses.dataclass(frozen=True, slots=True, ...)``
makes of the same class statement (re-executed from its source file), field by field
and on instances. ``scripts/gen-model --check`` keeps the generated module in step.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import inspect
import pickle
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fbs import _frozen_methods
from fbs.did import AccountName, DatasetName
from fbs.frozen import PRECOMPILED, model

ROOT = Path(__file__).resolve().parents[2]
GEN_MODEL = ROOT / "scripts" / "gen-model"
KEYS = sorted(_frozen_methods.METHODS)
DECORATORS = {"model": "kw_only=True", "positional_model": "", "ordered_model": "order=True"}
DATACLASS_METHODS = (
    "__init__",
    "__repr__",
    "__eq__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__hash__",
    "__setattr__",
    "__delattr__",
)
# Values that the classes' own checks accept, by class and by sample tag.
SAMPLES: dict[str, Any] = {
    "DatasetId": lambda tag: {"public_key": tag.encode() * 32},
    "DatasetName": lambda tag: {"value": f"name-{tag}"},
    "AccountName": lambda tag: {"value": f"account-{tag}"},
    "DatasetAlias": lambda tag: {
        "dataset_name": DatasetName(f"name-{tag}"),
        "account_name": AccountName(f"account-{tag}"),
    },
    "Multihash": lambda tag: {"code": 0x16, "digest": tag.encode() * 32},
    "Timestamp": lambda tag: {"nanos": ord(tag)},
    "DecodeLimits": lambda tag: {
        n: ord(tag) + i
        for i, n in enumerate(
            (
                "max_block_bytes",
                "max_nesting_depth",
                "max_vector_len",
                "max_string_len",
                "max_total_objects",
                "max_decoded_bytes",
            )
        )
    },
}


def _class_of(key: str) -> type:
    module, _, name = key.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type)
    return cls


def _reference(cls: type) -> type:
    """The real dataclass of ``cls``'s class statement (its other decorators dropped)."""
    module = sys.modules[cls.__module__]
    path = Path(inspect.getfile(module))
    tree = ast.parse(path.read_text(), str(path))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    kinds = [DECORATORS.get(getattr(d, "id", getattr(d, "attr", ""))) for d in node.decorator_list]
    options = next(k for k in kinds if k is not None)
    node.decorator_list = [
        ast.parse(f"_dataclass(frozen=True, slots=True, {options})", mode="eval").body
    ]
    future = ast.parse("from __future__ import annotations").body
    code = compile(ast.Module(body=[*future, node], type_ignores=[]), str(path), "exec")
    namespace = {**vars(module), "_dataclass": dataclasses.dataclass}
    exec(code, namespace)
    ref = namespace[cls.__name__]
    assert isinstance(ref, type)
    return ref


def _field_facts(cls: type) -> list[tuple[Any, ...]]:
    return [
        (
            f.name,
            f.type,
            f.default,
            f.default_factory,
            f.init,
            f.repr,
            f.hash,
            f.compare,
            dict(f.metadata),
            f.kw_only,
            f._field_type,  # type: ignore[attr-defined]
        )
        for f in dataclasses.fields(cls)
    ]


def _class_facts(cls: type) -> dict[str, Any]:
    init = vars(cls)["__init__"]
    return {
        "fields": _field_facts(cls),
        "params": repr(vars(cls)["__dataclass_params__"]),
        "match_args": vars(cls)["__match_args__"],
        "slots": vars(cls)["__slots__"],
        "doc": cls.__doc__,
        "names": (cls.__name__, cls.__qualname__, cls.__module__),
        "dict": sorted(vars(cls)),
        "signature": str(inspect.signature(cls)),
        "init": (init.__annotations__, init.__kwdefaults__, init.__defaults__),
        "methods": [
            (m, getattr(cls, m).__qualname__, getattr(cls, m).__module__)
            for m in DATACLASS_METHODS
            if m in vars(cls)
        ],
        # dataclasses' own pickling functions are private: ours have other names.
        "state_methods": [m in vars(cls) for m in ("__getstate__", "__setstate__")],
        "is_dataclass": dataclasses.is_dataclass(cls),
    }


def _sample(cls: type, tag: str) -> Any:
    """An instance of ``cls`` with a distinct placeholder value in every init field."""
    values: dict[str, Any] = {}
    if cls.__name__ in SAMPLES:
        values = SAMPLES[cls.__name__](tag)
    for f in dataclasses.fields(cls):
        if f.init and f.name not in values:
            values[f.name] = {"k": [tag, 1]} if f.name == "attributes" else f"{tag}:{f.name}"
    if all(f.kw_only for f in dataclasses.fields(cls)):
        return cls(**values)
    return cls(*values.values())


def _error(action: Any) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:
        action()
    return info.type, str(info.value)


def _instance_facts(cls: type) -> dict[str, Any]:
    a, a2, b = _sample(cls, "a"), _sample(cls, "a"), _sample(cls, "b")
    ordered = vars(cls)["__dataclass_params__"].order
    first = dataclasses.fields(cls)[0].name if dataclasses.fields(cls) else None
    facts: dict[str, Any] = {
        "repr": repr(a),
        "hash": hash(a),
        "eq": (a == a2, a == b, a != a2, a.__eq__(object())),
        "order": [_error(lambda: a < b) if not ordered else (a < b, a <= a2, a > b, a >= b)],
        "asdict": dataclasses.asdict(a),
        "astuple": dataclasses.astuple(a),
        "state": a.__getstate__(),
        "copy": repr(copy.copy(a)),
        "deepcopy": repr(copy.deepcopy(a)),
        "set_other": _error(lambda: setattr(a, "not_a_field", 1)),
        "del_other": _error(lambda: delattr(a, "not_a_field")),
    }
    if first is not None:
        facts["set"] = _error(lambda: setattr(a, first, 1))
        facts["del"] = _error(lambda: delattr(a, first))
        # One field changed at a time: which fields equality and hashing see.
        for f in dataclasses.fields(cls):
            if f.init:
                changed = dataclasses.replace(a, **{f.name: getattr(b, f.name)})
                facts[f"replace {f.name}"] = (repr(changed), a == changed, hash(a) == hash(changed))
    return facts


def test_generated_module_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(GEN_MODEL), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_every_model_class_is_precompiled() -> None:
    # Every table of the schema, every descriptor class and the values in them go through
    # the generated code.
    from fbs.did import DatasetAlias, DatasetId
    from fbs.limits import DecodeLimits
    from fbs.model import all_tables
    from fbs.model.schema import FieldDesc, ScalarType, TableDesc, UnionDesc, VariantDesc
    from fbs.multiformats import Multihash
    from fbs.timestamp import Timestamp

    keys = {f"{t.cls.__module__}.{t.cls.__qualname__}" for t in all_tables()}
    for cls in (
        *(FieldDesc, ScalarType, TableDesc, UnionDesc, VariantDesc),
        *(DatasetId, DatasetName, AccountName, DatasetAlias),
        *(Multihash, Timestamp, DecodeLimits),
    ):
        keys.add(f"{cls.__module__}.{cls.__qualname__}")
    assert keys <= set(KEYS)
    assert len(KEYS) > 100
    assert PRECOMPILED is (sys.version_info[:2] == (3, 11))


@pytest.mark.parametrize("key", KEYS)
def test_class_is_the_dataclass_of_its_statement(key: str) -> None:
    cls = _class_of(key)
    ref = _reference(cls)
    assert _class_facts(cls) == _class_facts(ref)


@pytest.mark.parametrize("key", KEYS)
def test_instances_behave_as_the_dataclass_ones(key: str) -> None:
    cls = _class_of(key)
    ref = _reference(cls)
    ours, theirs = _instance_facts(cls), _instance_facts(ref)
    assert ours == theirs
    if dataclasses.fields(cls):
        assert ours["set"][0] is dataclasses.FrozenInstanceError
        assert ours["eq"] == (True, False, False, NotImplemented)
    else:
        assert ours["eq"] == (True, True, False, NotImplemented)


@pytest.mark.parametrize("key", KEYS)
def test_instances_pickle(key: str) -> None:
    a = _sample(_class_of(key), "a")
    assert pickle.loads(pickle.dumps(a)) == a


def test_a_class_with_other_fields_than_generated_is_refused() -> None:
    class DataTypeDecimal:
        """Same key as the real one, other fields."""

        precision: int

    DataTypeDecimal.__module__ = "fbs.model.data"
    with pytest.raises(TypeError, match="stale: run scripts/gen-model"):
        model(DataTypeDecimal)


def test_a_class_without_generated_methods_is_refused() -> None:
    class NotGenerated:
        """Not in fbs/model/."""

    with pytest.raises(TypeError, match=r"<locals>\.NotGenerated: generated methods missing"):
        model(NotGenerated)


def test_a_mutable_default_is_refused_as_dataclasses_does() -> None:
    class DataTypeBinary:
        """Same key and field as the real one, a list default."""

        fixed_length: list[int] = []  # noqa: RUF012

    DataTypeBinary.__module__ = "fbs.model.data"
    with pytest.raises(ValueError, match="mutable default <class 'list'> for field fixed_length"):
        model(DataTypeBinary)


# -- the generator refuses what it cannot write --------------------------------------------


@pytest.fixture(scope="module")
def gen() -> dict[str, Any]:
    return runpy.run_path(str(GEN_MODEL))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('    """Doc."""\n    x: ClassVar[int] = 1\n', "ClassVar"),
        ('    """Doc."""\n    x: int = field(default_factory=int)\n', "field\\(\\): only"),
        ("    x: int\n", "needs a docstring"),
        ('    """Doc."""\n    def __eq__(self, other): ...\n', "only fields and methods"),
        ('    """Doc."""\n    def __lt__(self, other): ...\n', "only fields and methods"),
        ('    """Doc."""\n    __slots__ = ()\n', "only fields and methods"),
    ],
)
def test_generator_refuses(gen: dict[str, Any], tmp_path: Path, body: str, why: str) -> None:
    path = tmp_path / "bad.py"
    path.write_text(f"@model\nclass Bad:\n{body}")
    with pytest.raises(SystemExit, match=why):
        gen["classes_of"](path, "fbs.model.bad")


def test_generator_refuses_a_base_class(gen: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text('@positional_model\nclass Bad(Base):\n    """Doc."""\n')
    with pytest.raises(SystemExit, match="no base class"):
        gen["classes_of"](path, "fbs.model.bad")
