"""The one-line fix for a boolean or number written as a string (``"True"``, ``"2"``).

Such strings reach ``additional_config`` from hand-written JSON and from vLLM's dotted
command-line form (``--additional-config.enable_kv_nz=True`` arrives as the string "True",
since only ``true`` parses as JSON). The monolithic plugin read them by truthiness, so "False"
and "0" switched a feature *on*; coercing them now would silently change what such a config
did. They are rejected, and the error names the exact spelling that means what was written.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any, Literal

from pydantic.fields import FieldInfo

from ascend_config.schema.introspect import allowed_text, type_text

# The spellings whose meaning is unambiguous: Python's and JSON's names in any case, and the
# 0/1 of the plugin's environment variables. Anything else ("yes", "on") gets no guess.
_BOOL_WORDS = {"true": "true", "false": "false", "1": "true", "0": "false"}
_INT = re.compile(r"[+-]?\d{1,18}\Z")


def _literal_ints(annotation: Any) -> tuple[int, ...]:
    """The integers of the ``Literal`` inside ``annotation`` (through Annotated / Optional)."""
    if typing.get_origin(annotation) is Literal:
        return tuple(a for a in typing.get_args(annotation) if isinstance(a, int))
    for arg in typing.get_args(annotation):
        found = _literal_ints(arg)
        if found:
            return found
    return ()


def _number_spelling(text: str, kind: str) -> str | None:
    if _INT.match(text):
        return str(int(text))
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            return None
        return repr(number) if math.isfinite(number) else None
    return None


def string_fix(path: str, text: str, info: FieldInfo) -> tuple[str, str] | None:
    """(message, allowed) for ``text`` given where ``info`` wants a boolean or a number, or
    None when ``info`` wants neither (the caller's generic wording applies)."""
    kind = type_text(info)
    allowed = allowed_text(info)
    word = text.strip().lower()
    if word in ("null", "none") and allowed.startswith("null or"):
        return "a string, not null", f"{allowed}; write null without quotes"
    kind = kind.removesuffix(" | null")
    if kind == "bool":
        literal = _BOOL_WORDS.get(word)
        if literal is None:
            return "a string, not a boolean", "true or false, without quotes"
        return ("a string, not a boolean",
                f"true or false; write {literal} without quotes "
                f"(command line: --additional-config.{path}={literal})")
    choices = _literal_ints(info.annotation)
    numeric = kind in ("int", "float") or (kind == "enum" and choices) or (
        kind == "list" and ("integer" in allowed or "number" in allowed))
    if not numeric:
        return None
    spelled = _number_spelling(text.strip(), kind)
    if spelled is None or (choices and int(spelled) not in choices):
        return "a string, not a number", f"{allowed}, without quotes"
    return "a string, not a number", f"{allowed}; write {spelled} without quotes"
