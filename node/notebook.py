"""IPython/Jupyter extension: SQL over an odf workspace from a notebook.

``%load_ext node.notebook`` registers:

- ``%odf_workspace [DIR]``: the workspace the magics use (default: found as the ``odf``
  command finds it: ``$ODF_WORKSPACE``, else the nearest ``.odf/`` above the current
  directory); without ``DIR``, prints the one in use.
- ``%%odf_sql [-o NAME] [--arrow] [--engine spark]`` on the first line of a cell, the
  query below it; ``%odf_sql QUERY`` on one line. The query runs as ``odf sql`` runs it
  (`node.api.Workspace.sql`: embedded DataFusion unless ``--engine spark``) and the
  result is the cell's value: a pandas DataFrame, or the Arrow table with ``--arrow``.
  ``-o NAME`` also stores it in the notebook's variable ``NAME``.

IPython is not a dependency of the node: install ``ipykernel`` (or Jupyter) to use this.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from node.api import Workspace, open_workspace
from node.errors import UsageError

__all__ = ["OdfMagics", "load_ipython_extension"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%odf_sql", add_help=False, exit_on_error=False)
    p.add_argument("-o", "--output", metavar="NAME", help="also store the result in NAME")
    p.add_argument("--arrow", action="store_true", help="return the pyarrow Table")
    p.add_argument("--engine", default="datafusion", choices=("datafusion", "spark"))
    return p


class OdfMagics:
    """The magics' state: the IPython shell and the workspace in use."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self._ws: Workspace | None = None

    def workspace(self) -> Workspace:
        """The workspace in use (opened on first use).

        Raises:
            storage.errors.WorkspaceNotFound: none given and none found.
        """
        if self._ws is None:
            self._ws = open_workspace()
        return self._ws

    def odf_workspace(self, line: str) -> str:
        """``%odf_workspace [DIR]``: use the workspace at ``DIR``; the one in use."""
        path = line.strip()
        if path:
            if self._ws is not None:
                self._ws.close()
            self._ws = open_workspace(Path(path).expanduser())
        return str(self.workspace().storage.root)

    def odf_sql(self, line: str, cell: str | None = None) -> Any:
        """``%odf_sql QUERY`` or ``%%odf_sql [options]`` + the query as the cell."""
        if cell is None:
            options, query = _parser().parse_args([]), line
        else:
            try:
                options, extra = _parser().parse_known_args(shlex.split(line))
            except (argparse.ArgumentError, ValueError) as e:
                raise UsageError(f"%%odf_sql: {e}") from None
            if extra:
                raise UsageError(f"%%odf_sql: unknown option(s): {' '.join(extra)}")
            query = cell
        table = self.workspace().sql(query, engine=options.engine)
        result: Any = table if options.arrow else table.to_pandas()
        if options.output:
            self.shell.user_ns[options.output] = result
        return result


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics on ``ipython`` (called by ``%load_ext node.notebook``)."""
    magics = OdfMagics(ipython)
    ipython.register_magic_function(magics.odf_sql, magic_kind="line_cell", magic_name="odf_sql")
    ipython.register_magic_function(
        magics.odf_workspace, magic_kind="line", magic_name="odf_workspace"
    )
