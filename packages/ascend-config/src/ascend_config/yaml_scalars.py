"""Plain YAML scalars whose meaning depends on the reader, refused with their key path.

PyYAML reads YAML 1.1: ``010`` is the octal 8, ``1:30`` the base-60 90, ``yes``/``on`` are
true, ``1_000`` is 1000 and ``1e3`` is text, while YAML 1.2's core schema (and most other
readers and writers today) reads 10, the texts ``1:30``, ``yes`` and ``1_000``, and the float
1000.0. Such a config means one thing here and another to whoever wrote it, so
:func:`reader_dependent` says why, and :class:`KeyPaths` names where it is. Quoted scalars are
text in both and never refused. Timestamps (a YAML 1.1 type) are left to PyYAML's
constructors, which refuse impossible dates.
"""

from __future__ import annotations

import re
from typing import Any, Final

# YAML 1.2.2, 10.3.2 (the core schema's tag resolution).
_CORE: Final = (
    ("null", re.compile(r"~|null|Null|NULL|")),
    ("bool", re.compile(r"true|True|TRUE|false|False|FALSE")),
    ("int", re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")),
    ("float", re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                         r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")),
)
# Read as a decimal by YAML 1.2, as octal (or text, with an 8 or 9) by YAML 1.1.
_LEADING_ZERO: Final = re.compile(r"[-+]?0[0-9]+")
_LEFT_TO_PYYAML: Final = ("timestamp", "merge", "value")


def core_schema_tag(text: str) -> str:
    """The YAML 1.2 core schema's type of the plain scalar ``text``: null, bool, int, float
    or str."""
    for tag, pattern in _CORE:
        if pattern.fullmatch(text):
            return tag
    return "str"


def _yaml11_tag(text: str) -> str:
    import yaml

    tag: str = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    return tag.rsplit(":", 1)[-1]


def _core_value(text: str, tag: str) -> Any:
    if tag == "int":
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)
    if tag == "float":
        return float(text.replace(".inf", "inf").replace(".Inf", "inf").replace(".INF", "inf")
                     .replace(".nan", "nan").replace(".NaN", "nan").replace(".NAN", "nan"))
    return {"null": None, "bool": text.lower() == "true"}.get(tag, text)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value)


def reader_dependent(text: str) -> str | None:
    """Why the plain scalar ``text`` means one thing to YAML 1.1 (this reader) and another to
    YAML 1.2's core schema, or None when both read the same."""
    old = _yaml11_tag(text)
    new = core_schema_tag(text)
    if old in _LEFT_TO_PYYAML:
        return None
    if old == new and not (old == "int" and _LEADING_ZERO.fullmatch(text)):
        return None
    import yaml

    try:
        read_here = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):
        read_here = text
    read_by_12 = _core_value(text, new)
    if old == new and read_here == read_by_12:  # ``07``: octal or decimal, 7 either way
        return None
    return (f"YAML 1.1 (this reader) reads it as {_shown(read_here)}, YAML 1.2 as "
            f"{_shown(read_by_12)}; write the value so both read it alike (a plain "
            "decimal number, true or false), or quote it to mean text")


class KeyPaths:
    """Follows a YAML event stream (``yaml.parse``) and gives the key path of each scalar:
    mapping keys by their text, sequence items by their index."""

    def __init__(self) -> None:
        # Per open collection: [is_mapping, key or index, expecting a key].
        self._open: list[list[Any]] = []

    def _path(self) -> list[object]:
        return [frame[1] for frame in self._open]

    def _done(self) -> None:
        """A node finished: its mapping now expects the other half of a pair, its sequence
        the next index."""
        if not self._open:
            return
        frame = self._open[-1]
        if frame[0]:
            frame[2] = not frame[2]
        else:
            frame[1] += 1

    def start(self, is_mapping: bool) -> None:
        """A collection starts (as a value, an item or a complex key)."""
        if self._open and self._open[-1][0] and self._open[-1][2]:
            self._open[-1][1] = "?"  # a collection as a key: no text to name it by
        self._open.append([is_mapping, None if is_mapping else 0, True])

    def end(self) -> None:
        self._open.pop()
        self._done()

    def scalar(self, text: str) -> tuple[list[object], bool]:
        """The key path of a scalar (or alias) node, and whether it is a mapping key."""
        is_key = bool(self._open) and self._open[-1][0] and self._open[-1][2]
        if is_key:
            self._open[-1][1] = text
        path = self._path()
        self._done()
        return path, is_key
