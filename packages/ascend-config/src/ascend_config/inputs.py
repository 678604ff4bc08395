"""Bounded reading and checking of user input (stdlib only).

Files: special files (FIFO, device, socket, directory) are refused before they are opened, and
again after opening (the path could have been swapped in between), so a read never blocks; sizes
are checked before parsing, and nesting before anything recurses. Values: :func:`scan` walks a
nested value without recursion and stops at the first limit of :mod:`ascend_config.limits`
crossed, so its work is bounded by the limits, not by the value: a self-referencing dict or a
YAML alias bomb (whose expansion is exponential) costs at most ``max_values`` steps.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ascend_config.errors import render_path
from ascend_config.limits import MAX_DEPTH, MAX_YAML_ALIASES
from ascend_config.yaml_scalars import KeyPaths, reader_dependent

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(text: str, *, is_path: bool = False, max_chars: int | None = None) -> str | None:
    """Why ``text`` cannot be used (as a file-system path when ``is_path``), else None.

    Unpaired surrogates (from ``"\\udcff"`` escapes or undecodable bytes) cannot be written as
    UTF-8 JSON; a NUL byte cannot be part of a path.
    """
    if max_chars is not None and len(text) > max_chars:
        return f"longer than {max_chars} characters"
    if is_path and "\x00" in text:
        return "contains a NUL byte"
    if _SURROGATE.search(text):
        return "contains an unpaired surrogate (not valid Unicode text)"
    return None


@dataclass(frozen=True)
class Finding:
    """The first limit a value crossed: where (key path from the root) and what."""

    parts: tuple[object, ...]
    reason: str
    kind: str  # "depth", "values", "chars" or "json"

    def text(self) -> str:
        """The reason, with the inner key path when there is one."""
        return f"{self.reason} (at {render_path(self.parts)})" if self.parts else self.reason


# A path is kept as a linked list (parent, key) so each stack entry costs O(1).
_Where = tuple[Any, object] | None


def _parts(where: _Where) -> tuple[object, ...]:
    out: list[object] = []
    while where is not None:
        where, key = where
        out.append(key)
    return tuple(reversed(out))


def scan(
    value: object,
    *,
    max_depth: int,
    max_values: int,
    max_chars: int | None = None,
    json_only: bool = False,
) -> Finding | None:
    """The first problem of ``value``'s shape, else None.

    Counts every object key and list item (a value reached twice counts twice) against
    ``max_values`` and every string character against ``max_chars``; objects and lists may nest
    ``max_depth`` levels. With ``json_only`` the value must also be plain JSON: objects with
    string keys, lists, finite numbers, valid text, true/false/null.
    """
    values = 0
    chars = 0
    stack: list[tuple[object, int, _Where]] = [(value, 1, None)]
    while stack:
        node, level, where = stack.pop()
        reason, kind = "", ""
        if isinstance(node, str):
            chars += len(node)
            if max_chars is not None and chars > max_chars:
                reason, kind = f"more than {max_chars} characters of text", "chars"
            elif json_only:
                reason, kind = text_problem(node) or "", "json"
        elif isinstance(node, (Mapping, list, tuple)):
            values += len(node)
            if level > max_depth:
                reason, kind = f"nested deeper than {max_depth} levels", "depth"
            elif values > max_values:
                reason, kind = f"more than {max_values} keys and list items", "values"
            elif json_only and isinstance(node, tuple):
                reason, kind = "tuple is not a JSON value", "json"
            elif isinstance(node, Mapping):
                for key, item in node.items():
                    if json_only and not isinstance(key, str):
                        reason, kind = "object keys must be strings", "json"
                        break
                    stack.append((key, level + 1, where))
                    stack.append((item, level + 1, (where, key)))
            else:
                stack.extend((item, level + 1, (where, index)) for index, item in enumerate(node))
        elif json_only:
            reason, kind = _scalar_problem(node) or "", "json"
        if reason:
            return Finding(_parts(where), reason, kind)
    return None


def _scalar_problem(node: object) -> str | None:
    if isinstance(node, float):
        return None if math.isfinite(node) else "numbers must be finite (no NaN or Infinity)"
    if node is None or isinstance(node, (bool, int)):
        return None
    return f"{type(node).__name__} is not a JSON value"


class InputError(ValueError):
    """A file or text that cannot be used as input; the message is one line."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# A JSON string (an unterminated one runs to the end, as for the parser) or a bracket.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))


def show_path(path: str | os.PathLike[str]) -> str:
    """A path for one error line: quoted, non-printable characters escaped, at most 200 long."""
    text = repr(os.fspath(path))
    return text if len(text) <= 200 else text[:197] + "..."


def _refuse_special(mode: int, shown: str) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise InputError(f"{shown} is {kind}; give a regular file")


def read_text_file(path: str | os.PathLike[str], limit: int, what: str) -> str:
    """The UTF-8 text of regular file ``path`` of at most ``limit`` bytes."""
    shown = f"{what} {show_path(path)}"
    why = text_problem(os.fspath(path), is_path=True)
    if why and "\x00" in os.fspath(path):
        raise InputError(f"cannot read {shown}: the path {why}")
    try:
        mode = os.stat(path).st_mode
        _refuse_special(mode, shown)
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise InputError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except UnicodeEncodeError:  # a surrogate that is not an undecodable byte of the argv
        raise InputError(f"cannot read {shown}: the path {why}") from None
    with os.fdopen(fd, "rb") as fh:
        _refuse_special(os.fstat(fh.fileno()).st_mode, shown)
        data = _read_at_most(fh, limit, shown)
    return decode_utf8(data, shown)


def read_stream(stream: IO[bytes], limit: int, what: str) -> str:
    """The UTF-8 text of a binary stream (stdin), at most ``limit`` bytes."""
    try:
        data = _read_at_most(stream, limit, what)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}") from None
    return decode_utf8(data, what)


def _read_at_most(stream: IO[bytes], limit: int, shown: str) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{shown} is larger than the limit of {limit:,} bytes")
    return data


def decode_utf8(data: bytes, shown: str) -> str:
    """``data`` decoded as strict UTF-8; the error names the offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown} is not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at "
                         f"offset {exc.start})") from None


def json_depth(text: str) -> int:
    """Deepest nesting of ``[`` / ``{`` outside strings (linear; exact for valid JSON)."""
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def parse_json_text(text: str, shown: str) -> Any:
    """Parse JSON ``text``; nesting deeper than MAX_DEPTH is refused before parsing."""
    if json_depth(text) > MAX_DEPTH:
        raise InputError(f"{shown} is nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as exc:
        raise InputError(f"{shown} {exc}") from None
    except ValueError as exc:
        raise InputError(f"{shown} is not valid JSON: {exc}") from None


class _DuplicateKey(ValueError):
    """A mapping gives one key twice: the two values contradict each other."""

    def __init__(self, key: Any, where: str = "") -> None:
        super().__init__(f"gives the key {key!r} twice{where}; give each key once (which "
                         "value was meant is not for the reader to guess)")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(key)
        found[key] = value
    return found


def _unique_key_loader(base: Any) -> Any:
    """``base`` (a safe YAML loader) refusing a mapping that gives a key twice (merge keys,
    ``<<``, still override as YAML defines)."""

    class UniqueKeyLoader(base):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in getattr(node, "value", ()):
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: YAML itself refuses it below
                    continue
                if repeated:
                    raise _DuplicateKey(key, f" (line {key_node.start_mark.line + 1})")
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def parse_yaml_text(text: str, shown: str) -> Any:
    """Parse one YAML document (safe types only) with bounded nesting and alias uses; a plain
    scalar that YAML 1.1 and 1.2 read differently (``010``, ``1:30``, ``yes``) is refused,
    naming its key path (:mod:`ascend_config.yaml_scalars`)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = aliases = 0
    paths = KeyPaths()
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError(f"{shown} is nested deeper than {MAX_DEPTH} levels")
                paths.start(isinstance(event, yaml.MappingStartEvent))
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                paths.end()
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise InputError(f"{shown} uses more than {MAX_YAML_ALIASES} YAML aliases")
                paths.scalar("*")
            elif isinstance(event, yaml.ScalarEvent):
                path, is_key = paths.scalar(event.value)
                why = (reader_dependent(event.value)
                       if event.implicit[0] and not event.style else None)
                if why:
                    what = "key" if is_key else f"{render_path(path)} ="
                    where = f"(in {render_path(path[:-1])}) " if is_key and path[:-1] else ""
                    raise InputError(f"{shown}: {what} {event.value} {where}is read "
                                     f"differently by YAML versions: {why}")
        return yaml.load(text, Loader=_unique_key_loader(loader))
    except _DuplicateKey as exc:
        raise InputError(f"{shown} {exc}") from None
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())[:200]
        raise InputError(f"{shown} is not valid YAML: {first}") from None
    except InputError:
        raise
    except ValueError as exc:
        # The constructors raise plain ValueError for scalars that look typed but are not
        # values: 2024-02-30, a +25:00 offset, an int of more than 4,300 digits.
        first = " ".join(str(exc).split())[:200]
        raise InputError(f"{shown} has a value YAML cannot build: {first}") from None


def load_config_file(path: str | os.PathLike[str], limit: int) -> Any:
    """A JSON (or, by suffix ``.yaml``/``.yml``, YAML) config file, parsed within the limits."""
    text = read_text_file(path, limit, "config file")
    shown = f"config file {show_path(path)}"
    if Path(path).suffix in (".yaml", ".yml"):
        return parse_yaml_text(text, shown)
    return parse_json_text(text, shown)
