"""Read the schema back: each key's type, default, allowed values, description, env fallback.

Used by error messages (what is allowed, did-you-mean), ``ascend-config explain`` and the
generated reference page, so the three always agree.
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ascend_config.schema.base import Section
from ascend_config.schema.top import AdditionalConfig


@dataclass(frozen=True)
class KeyDoc:
    """Everything known about one key of ``additional_config``."""

    path: str
    type_text: str
    default: Any
    allowed: str
    description: str
    env: str | None
    deprecated: str | None
    is_section: bool


def section_of(annotation: Any) -> type[Section] | None:
    """The section model inside ``annotation`` (``X`` or ``X | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, Section):
            return arg
    return None


def _constraints(info: FieldInfo) -> str:
    parts: list[str] = []
    for meta in info.metadata:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(meta, attr, None)
            if bound is not None and isinstance(meta, annotated_types.BaseMetadata):
                parts.append(f"{sym} {bound}")
    return " and ".join(parts)


def _base_text(annotation: Any) -> tuple[str, bool]:
    """(words for the type, nullable)."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        text = _base_text(inner[0])[0] if len(inner) == 1 else "a value"
        return text, len(inner) < len(args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args), False
    if origin is tuple or origin is list:
        item = _base_text(args[0])[0] if args else "value"
        return f"a list of {item.removeprefix('a ').removeprefix('an ')}s", False
    if origin is dict:
        return "a JSON object", False
    if origin is typing.Annotated:
        return _base_text(args[0])
    section = section_of(annotation)
    if section is not None:
        return "a JSON object", False
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation))), False


def allowed_text(info: FieldInfo) -> str:
    """What a field accepts, in words (explicit wording wins over the derived one)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if isinstance(extra.get("allowed"), str):
        return str(extra["allowed"])
    text, nullable = _base_text(info.annotation)
    bounds = _constraints(info)
    if bounds:
        text = f"{text} {bounds}"
    return f"null or {text}" if nullable else text


def type_text(info: FieldInfo) -> str:
    """Short type name for tables: bool, int, float, str, object, list, enum."""
    text, nullable = _base_text(info.annotation)
    short = {"true or false": "bool", "an integer": "int", "a number": "float",
             "a string": "str", "a JSON object": "object"}.get(text)
    if short is None:
        short = "enum" if text.startswith("one of") else "list" if "list" in text else text
    return f"{short} | null" if nullable else short


def _default(info: FieldInfo) -> Any:
    if info.default_factory is not None:
        return {}
    value = info.default
    return list(value) if isinstance(value, tuple) else value


def key_doc(path: str, info: FieldInfo) -> KeyDoc:
    """Document one field found at ``path``."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    replacement = extra.get("replacement") if extra.get("deprecated") else None
    env = extra.get("env")
    return KeyDoc(
        path=path,
        type_text=type_text(info),
        default=_default(info),
        allowed=allowed_text(info),
        description=info.description or "",
        env=env if isinstance(env, str) else None,
        deprecated=replacement if isinstance(replacement, str) else None,
        is_section=section_of(info.annotation) is not None,
    )


def iter_keys(model: type[BaseModel] = AdditionalConfig, prefix: str = "") -> Iterator[KeyDoc]:
    """Every key of ``model``, depth first (a section before its keys)."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield key_doc(path, info)
        section = section_of(info.annotation)
        if section is not None:
            yield from iter_keys(section, path + ".")


def field_at(parts: Sequence[object]) -> tuple[type[BaseModel], FieldInfo | None, int]:
    """Walk ``parts`` from the top: (model reached, field or None, how many parts matched).

    The model is the one holding the first unmatched part (the section itself when every part
    matched and the last names a section)."""
    model: type[BaseModel] = AdditionalConfig
    info: FieldInfo | None = None
    for depth, part in enumerate(parts):
        if not isinstance(part, str) or part not in model.model_fields:
            return model, info, depth
        info = model.model_fields[part]
        section = section_of(info.annotation)
        if section is None:
            return model, info, depth + 1
        model = section
    return model, info, len(parts)


def explain(dotted: str) -> KeyDoc | None:
    """The documentation of ``dotted`` (e.g. ``scheduler_config.dyntra_lb_config.end_step``)."""
    parts = [p for p in dotted.strip().split(".") if p]
    if not parts:
        return None
    _, info, matched = field_at(parts)
    if info is None or matched != len(parts):
        return None
    return key_doc(".".join(parts), info)


@functools.cache
def all_paths() -> tuple[str, ...]:
    """Every dotted key path of the schema."""
    return tuple(doc.path for doc in iter_keys())


@functools.cache
def _paths_by_leaf() -> dict[str, str]:
    """Last key name -> the first dotted path that ends with it."""
    out: dict[str, str] = {}
    for path in all_paths():
        out.setdefault(path.rsplit(".", 1)[-1], path)
    return out


def closest(word: str, choices: Iterable[str], cutoff: float) -> tuple[float, str] | None:
    """The choice most similar to ``word`` with its similarity, if at least ``cutoff``."""
    matcher = difflib.SequenceMatcher(b=word)
    best: tuple[float, str] | None = None
    for choice in choices:
        matcher.set_seq1(choice)
        score = matcher.ratio()
        if score >= cutoff and (best is None or score > best[0]):
            best = (score, choice)
    return best


_SECTION_WORD = "_config"


def _closest_name(key: str, names: Iterable[str], cutoff: float) -> tuple[float, str] | None:
    """The name most similar to ``key`` (>= ``cutoff``). When both hold ``_config`` they are
    compared without it: the shared word alone would make ``ucm_config`` look like
    ``dump_config``."""
    if _SECTION_WORD not in key:
        return closest(key, names, cutoff)
    sections: dict[str, str] = {}
    plain: list[str] = []
    for name in names:
        if _SECTION_WORD in name:
            sections.setdefault(name.replace(_SECTION_WORD, ""), name)
        else:
            plain.append(name)
    by_stem = closest(key.replace(_SECTION_WORD, ""), sections, cutoff)
    other = closest(key, plain, cutoff)
    if by_stem is not None and (other is None or by_stem[0] >= other[0]):
        return by_stem[0], sections[by_stem[1]]
    return other


def suggest(key: str, model: type[BaseModel]) -> str | None:
    """A did-you-mean for unknown ``key`` inside ``model``.

    A dotted key (a path written flat) is compared with whole paths. Otherwise the closer of
    two candidates wins (a sibling on a tie): a sibling key of ``model`` (similarity >= 0.6,
    ``*_config`` names by their stems)
    and a key of the same or a very similar name elsewhere (>= 0.8), given as its path
    (``dynamic_eplb`` -> ``eplb_config.dynamic_eplb``). Keys longer than 100 characters get
    none (the comparison is quadratic in the length).
    """
    if not isinstance(key, str) or len(key) > 100:
        return None
    if "." in key:
        found = closest(key.lower(), all_paths(), 0.6)
        return found[1] if found else None
    sibling = _closest_name(key, model.model_fields, 0.6)
    by_leaf = _paths_by_leaf()
    elsewhere = _closest_name(key.lower(), by_leaf, 0.8)
    if elsewhere and (sibling is None or elsewhere[0] > sibling[0]):
        return by_leaf[elsewhere[1]]
    return sibling[1] if sibling else None
