"""Keep numpy, pandas and cloudpickle out of a short-lived ``odf`` process.

pyarrow imports numpy when it can: about 0.1 s of a read command's start here, for code
those commands never run (they read Parquet and print rows through pyarrow's numpy-free
paths). `refuse_numpy` makes those imports fail before pyarrow is first loaded, so pyarrow
starts without them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import Loader
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Final

__all__ = ["refuse_numpy"]

#: Top-level packages `refuse_numpy` keeps out of the process (pyarrow pickles with
#: cloudpickle when it is there, else with the standard pickle: a query pickles nothing).
_REFUSED: Final = ("numpy", "pandas", "cloudpickle")


#: flatbuffers' module that decides whether numpy is there (`_NoNumpyLoader`).
_FLATBUFFERS_COMPAT: Final = "flatbuffers.compat"


class _NoNumpyLoader(Loader):
    """Loads ``flatbuffers.compat`` with its ``import_numpy`` answering None.

    flatbuffers looks for numpy on disk (``PathFinder``), past the meta path, then
    imports it: with numpy refused that import would fail. Its builder uses numpy only
    for ``CreateNumpyVector``, which the codec never calls.
    """

    def __init__(self, inner: Loader) -> None:
        self._inner = inner

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        setattr(module, "import_numpy", lambda: None)  # noqa: B010 (a module's attribute)


class _Refuse:
    """A meta-path finder that makes imports of `_REFUSED` packages fail."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] in _REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        if name == _FLATBUFFERS_COMPAT:
            spec = PathFinder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _NoNumpyLoader(spec.loader)
            return spec
        return None


def refuse_numpy() -> bool:
    """Keep numpy, pandas and cloudpickle out of this process, if none of them nor
    pyarrow is loaded yet; whether it did.

    pyarrow imports numpy when it can (a third of ``odf sql``'s and ``odf tail``'s
    start-up) and then DataFusion's scalars import pandas; without them pyarrow runs its
    numpy-free paths, which is all a query, a tail and their renderings use. The refusal
    stays for the life of the process: pyarrow does not initialize numpy's C API once it
    started without it, so a later import could hand it arrays it cannot read. Only for
    a short-lived process that runs one command (the CLI); a process that already has
    them is left alone.
    """
    if any(m in sys.modules for m in (*_REFUSED, "pyarrow", _FLATBUFFERS_COMPAT)):
        return False
    sys.meta_path.insert(0, _Refuse())
    return True
