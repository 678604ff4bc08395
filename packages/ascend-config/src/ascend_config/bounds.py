"""Bounded checks of user values: text validity and the shape of nested values (stdlib only).

:func:`scan` walks a nested value without recursion and stops at the first limit crossed, so
its work is bounded by the limits, not by the value: a self-referencing dict or a YAML alias
bomb (whose expansion is exponential) costs at most ``max_values`` steps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascend_config.errors import render_path

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
