"""Safe YAML / JSON parsing and kamu-style YAML emission.

Loading uses PyYAML's pure-Python pipeline with our own resolver and constructor,
never arbitrary object construction. Decisions (YAML 1.1 quirks that must not bite):

- Plain scalars resolve per the YAML 1.2 *core* schema: booleans are only
  ``true``/``false`` (any case variant of those two words), null is ``~``/``null``/empty,
  integers are decimal only (``0x10``, ``0o17``, ``1_000``, ``1:20`` stay strings), floats
  follow the 1.2 pattern (``1e3`` is a float, ``.inf``, ``.nan``). ``yes``/``no``/``on``/
  ``off`` are strings; ``2020-01-01`` and RFC 3339 instants are strings (never dates),
  so they reach `Timestamp.parse_rfc3339` unchanged.
- Numbers keep their source text (`YamlInt`, `YamlFloat`) so a string field may hold
  an unquoted ``10`` or ``1.10`` verbatim, as serde_yaml allows.
- Only the standard tags str / int / float / bool / null / seq / map are constructed;
  ``!!binary``, ``!!timestamp``, ``!!set``, ``!!python/...`` and merge keys (``<<``)
  are refused. Duplicate mapping keys are an error (PyYAML would keep the last).
- Nesting is limited while composing (before Python recursion could overflow) and
  the expanded node count is bounded afterwards (`check_plain`), which defuses alias
  bombs.

Emission mimics serde_yaml: block style, keys in the given order, sequence items at
the parent key's indentation, no line wrapping, multi-line strings as literal blocks,
strings quoted only when a reader could take them for something else. Instants are
written unquoted (``systemTime: 2020-01-01T12:00:00Z``) as kamu does; our loader and
serde_yaml read them back as strings.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Hashable
from typing import Any, Final

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.emitter import Emitter
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.representer import SafeRepresenter
from yaml.resolver import BaseResolver, Resolver
from yaml.scanner import Scanner
from yaml.serializer import Serializer

from fbs.errors import ManifestError, ManifestLimitExceeded
from fbs.manifest.limits import DEFAULT_MANIFEST_LIMITS, MAX_INT_DIGITS, ManifestLimits
from fbs.manifest.plain import YamlFloat, YamlInt, check_plain

__all__ = ["dump_yaml", "parse_json", "parse_text", "parse_yaml", "parse_yaml_all"]

# PyYAML applies implicit resolvers with `re.match`, hence the explicit `\Z` anchors.
_BOOL_RE: Final = re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z")
_NULL_RE: Final = re.compile(r"(?:~|null|Null|NULL|)\Z")
_INT_RE: Final = re.compile(r"[-+]?[0-9]+\Z")
_FLOAT_RE: Final = re.compile(
    r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)
_TAG_PREFIX: Final = "tag:yaml.org,2002:"
_DIGITS: Final = list("-+0123456789")

_BREAKS_RE: Final = re.compile("[\r\x85\u2028\u2029]")

# Huge, so that long strings (DIDs, SQL lines) are never folded.
_NO_WRAP: Final = 1 << 30


def _add_core_resolvers(cls: type[BaseResolver]) -> None:
    cls.add_implicit_resolver(_TAG_PREFIX + "bool", _BOOL_RE, list("tTfF"))
    cls.add_implicit_resolver(_TAG_PREFIX + "null", _NULL_RE, ["~", "n", "N", ""])
    cls.add_implicit_resolver(_TAG_PREFIX + "int", _INT_RE, _DIGITS)
    cls.add_implicit_resolver(_TAG_PREFIX + "float", _FLOAT_RE, [*_DIGITS, "."])


# -- loading ----------------------------------------------------------------------------


class _CoreResolver(BaseResolver):
    """YAML 1.2 core-schema resolution of plain scalars (no timestamps, no merge)."""

    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012 (PyYAML class registry)


_add_core_resolvers(_CoreResolver)


def _full(regex: re.Pattern[str], text: str) -> bool:
    return regex.fullmatch(text) is not None


class _Constructor(SafeConstructor):
    """Builds only JSON-like values; see the module docstring."""

    def construct_core_bool(self, node: Node) -> bool:
        text = self.construct_scalar(node)  # type: ignore[arg-type]
        if not _full(_BOOL_RE, text):
            raise ConstructorError(None, None, f"invalid boolean {text!r}", node.start_mark)
        return text.lower() == "true"

    def construct_core_int(self, node: Node) -> int:
        text = self.construct_scalar(node)  # type: ignore[arg-type]
        if not _full(_INT_RE, text):
            raise ConstructorError(None, None, f"invalid integer {text!r}", node.start_mark)
        if len(text) > MAX_INT_DIGITS:
            raise ConstructorError(None, None, "integer literal too long", node.start_mark)
        return YamlInt(int(text), text)

    def construct_core_float(self, node: Node) -> float:
        text = self.construct_scalar(node)  # type: ignore[arg-type]
        if not _full(_FLOAT_RE, text) and not _full(_INT_RE, text):
            raise ConstructorError(None, None, f"invalid number {text!r}", node.start_mark)
        lowered = text.lower()
        if lowered.endswith(".nan"):
            value = math.nan
        elif lowered.endswith(".inf"):
            value = -math.inf if text.startswith("-") else math.inf
        else:
            value = float(text)
        return YamlFloat(value, text)

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            raise ConstructorError(None, None, "expected a mapping", node.start_mark)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    "found an unhashable key", key_node.start_mark,
                )  # fmt: skip
            if key in mapping:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark,
                )  # fmt: skip
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


# A fresh registry (not a copy of SafeConstructor's): every other tag is refused.
_Constructor.yaml_constructors = {
    _TAG_PREFIX + "null": SafeConstructor.construct_yaml_null,
    _TAG_PREFIX + "bool": _Constructor.construct_core_bool,
    _TAG_PREFIX + "int": _Constructor.construct_core_int,
    _TAG_PREFIX + "float": _Constructor.construct_core_float,
    _TAG_PREFIX + "str": SafeConstructor.construct_yaml_str,
    _TAG_PREFIX + "seq": SafeConstructor.construct_yaml_seq,
    _TAG_PREFIX + "map": SafeConstructor.construct_yaml_map,
    None: SafeConstructor.construct_undefined,
}


class _Loader(Reader, Scanner, Parser, Composer, _Constructor, _CoreResolver):
    """Pure-Python safe loader with a composition depth limit."""

    def __init__(self, stream: str, max_depth: int) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Constructor.__init__(self)
        _CoreResolver.__init__(self)
        self._depth = 0
        self._max_depth = max_depth

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > self._max_depth:
                raise ManifestLimitExceeded(f"YAML nested deeper than {self._max_depth}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _to_text(data: str | bytes, limits: ManifestLimits) -> str:
    if isinstance(data, bytes | bytearray | memoryview):
        if len(data) > limits.max_bytes:
            raise ManifestLimitExceeded(f"manifest larger than {limits.max_bytes} bytes")
        try:
            return bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ManifestError(f"manifest is not UTF-8 text: {e}") from None
    if not isinstance(data, str):
        raise ManifestError(f"manifest must be str or bytes, got {type(data).__name__}")
    # A str can hold at most 4 UTF-8 bytes per character; count exactly only if needed.
    if len(data) * 4 > limits.max_bytes:
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError:
            raise ManifestError("manifest text is not valid Unicode") from None
        if size > limits.max_bytes:
            raise ManifestLimitExceeded(f"manifest larger than {limits.max_bytes} bytes")
    return data


def parse_yaml(data: str | bytes, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS) -> Any:
    """Parse one YAML document into plain data (see the module docstring for the rules).

    Raises:
        ManifestError: not UTF-8, syntax error, several documents, refused tag,
            duplicate key.
        ManifestLimitExceeded: size, depth or node-count limit exceeded.
    """
    text = _to_text(data, limits)
    loader: _Loader | None = None
    try:
        # The reader already scans the text (refusing non-printable characters).
        loader = _Loader(text, limits.max_depth)
        value = loader.get_single_data()
    except ManifestError:
        raise  # a limit hit while composing
    except yaml.YAMLError as e:
        raise ManifestError(f"invalid YAML: {_yaml_error_text(e)}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        # Defensive: PyYAML internals are not documented to raise only YAMLError.
        raise ManifestError(f"invalid YAML: {type(e).__name__}: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()
    check_plain(value, limits)
    return value


def parse_yaml_all(
    data: str | bytes, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS
) -> list[Any]:
    """Parse a YAML stream of one or more ``---``-separated documents (same rules).

    Empty documents (a stray ``---`` at the end) are skipped; the size limit applies
    to the whole stream, the depth and node limits to each document.

    Raises:
        ManifestError: not UTF-8, syntax error, refused tag, duplicate key.
        ManifestLimitExceeded: size, depth or node-count limit exceeded.
    """
    text = _to_text(data, limits)
    loader: _Loader | None = None
    values: list[Any] = []
    try:
        loader = _Loader(text, limits.max_depth)
        while loader.check_data():  # type: ignore[no-untyped-call]
            value = loader.get_data()
            check_plain(value, limits)
            if value is not None:
                values.append(value)
    except ManifestError:
        raise
    except yaml.YAMLError as e:
        raise ManifestError(f"invalid YAML: {_yaml_error_text(e)}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        raise ManifestError(f"invalid YAML: {type(e).__name__}: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return values


def _yaml_error_text(error: yaml.YAMLError) -> str:
    """PyYAML's error on one line: the place, then what is wrong there.

    PyYAML's own text spans several lines (context, problem, a caret under a copy of
    the line); an error a user reads is one line.
    """
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        parts = [error.context, error.problem]
        what = ": ".join(p for p in parts if p) or type(error).__name__
        if mark is not None:
            return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
        return what
    return " ".join(str(error).split())


def _reject_constant(name: str) -> Any:
    raise ManifestError(f"invalid JSON: {name} is not a JSON number")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ManifestError(f"invalid JSON: duplicate key {k!r}")
        out[k] = v
    return out


def parse_json(data: str | bytes, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS) -> Any:
    """Parse strict JSON (no NaN / Infinity, no duplicate keys) into plain data.

    Raises:
        ManifestError: invalid JSON.
        ManifestLimitExceeded: size, depth or node-count limit exceeded.
    """
    text = _to_text(data, limits)
    try:
        value = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise ManifestError(f"invalid JSON: {e}") from None
    check_plain(value, limits)
    return value


def parse_text(data: str | bytes, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS) -> Any:
    """Parse JSON if the text is a JSON object, else YAML.

    JSON is tried first for text starting with ``{`` because PyYAML (YAML 1.1) is not
    a full JSON parser; if that fails the text is parsed as YAML (flow mappings).

    Raises:
        ManifestError: neither valid JSON nor valid YAML.
        ManifestLimitExceeded: a limit was exceeded.
    """
    text = _to_text(data, limits)
    if text.lstrip(" \t\r\n\ufeff").startswith("{"):
        try:
            return parse_json(text, limits)
        except ManifestLimitExceeded:
            raise
        except ManifestError:
            pass
    return parse_yaml(text, limits)


# -- dumping ----------------------------------------------------------------------------


class _QuotingResolver(Resolver):
    """Quote a string if YAML 1.1 *or* our core-schema loader would not read it as str.

    The 1.1 timestamp rule is dropped so instants stay unquoted, as kamu writes them.
    """

    yaml_implicit_resolvers: dict[Any, Any] = {  # noqa: RUF012 (PyYAML class registry)
        first: [(tag, rx) for tag, rx in rules if tag != _TAG_PREFIX + "timestamp"]
        for first, rules in Resolver.yaml_implicit_resolvers.items()
    }


_add_core_resolvers(_QuotingResolver)


class _Dumper(Emitter, Serializer, SafeRepresenter, _QuotingResolver):
    """SafeDumper pieces with our resolver (decides quoting) and string styles."""

    def __init__(self, stream: io.StringIO) -> None:
        Emitter.__init__(self, stream, indent=2, width=_NO_WRAP, allow_unicode=True)
        Serializer.__init__(self)
        SafeRepresenter.__init__(self, default_flow_style=False, sort_keys=False)
        _QuotingResolver.__init__(self)

    def ignore_aliases(self, data: Any) -> bool:
        # Plain data from `to_plain` is a tree; never emit anchors / aliases.
        return True

    def represent_text(self, data: str) -> ScalarNode:
        # Literal blocks for multi-line text, like serde_yaml; the emitter falls back
        # to double quotes when a literal block cannot hold the string exactly.
        if _BREAKS_RE.search(data):
            # YAML 1.1 line breaks other than LF are folded or normalized inside plain,
            # quoted and literal scalars; only double quotes escape them faithfully.
            style: str | None = '"'
        elif "\n" in data:
            style = "|"
        else:
            style = None
        return self.represent_scalar(_TAG_PREFIX + "str", data, style=style)

    def represent_number_text(self, data: YamlInt | YamlFloat) -> ScalarNode:
        # Numbers straight from `parse_yaml` are written as they were read.
        tag = "int" if isinstance(data, YamlInt) else "float"
        return self.represent_scalar(_TAG_PREFIX + tag, data.yaml_text)


_Dumper.add_representer(str, _Dumper.represent_text)
_Dumper.add_representer(YamlInt, _Dumper.represent_number_text)
_Dumper.add_representer(YamlFloat, _Dumper.represent_number_text)


def dump_yaml(data: Any) -> str:
    """Render plain data as kamu-style block YAML (see the module docstring).

    Raises:
        ManifestError: ``data`` holds something other than plain data.
    """
    stream = io.StringIO()
    dumper = _Dumper(stream)
    try:
        dumper.open()
        dumper.represent(data)
        dumper.close()
    except yaml.YAMLError as e:
        raise ManifestError(f"cannot render YAML: {e}") from None
    finally:
        dumper.dispose()
    return stream.getvalue()
