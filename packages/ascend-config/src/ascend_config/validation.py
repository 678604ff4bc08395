"""Schema validation that reports every problem and still yields a best-effort config.

Pydantic reports every field error of one validation; each becomes a :class:`Problem` with the
key path, the value given and what is allowed. The offending keys are then dropped (so they take
their defaults) and validation repeats, so the cross-field and deployment rules still run on
everything else and one error lists all mistakes at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ascend_config.errors import Problem, make_problem, render_path
from ascend_config.introspect import allowed_text, field_at, section_of, suggest
from ascend_config.schema_top import AdditionalConfig

_MAX_ROUNDS = 4


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[type[BaseModel], int]:
    """The deepest section model along ``loc`` and how many parts lead to it."""
    depth = 0
    for depth, part in enumerate(loc):
        info = model.model_fields.get(part) if isinstance(part, str) else None
        section = section_of(info.annotation) if info is not None else None
        if section is None:
            return model, depth
        model = section
    return model, len(loc) if loc else 0


def problem_from_error(error: ErrorDetails, root: type[BaseModel]) -> Problem:
    """One pydantic error as one problem line."""
    loc = tuple(error["loc"])
    path = render_path(loc)
    value = error.get("input")
    kind = error["type"]
    if kind == "extra_forbidden":
        parent, _ = _walk(root, loc[:-1])
        guess = suggest(str(loc[-1]), parent) if loc else None
        allowed = f"did you mean '{guess}'?" if guess else "a key listed by `ascend-config explain`"
        return make_problem(path, value, allowed, "unknown key")
    message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if root is AdditionalConfig:
        _, info, matched = field_at(loc)
        allowed = allowed_text(info) if info is not None and matched >= 1 else "see the schema"
    else:
        allowed = "a value written by AscendConfig.to_json"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "must be a JSON object"
    return make_problem(path, value, allowed, message)


def problems_from_validation(exc: ValidationError, root: type[BaseModel]) -> list[Problem]:
    """Every error of ``exc`` as a problem."""
    return [problem_from_error(e, root) for e in exc.errors(include_url=False)]


def _without(data: Mapping[str, Any], loc: tuple[int | str, ...]) -> dict[str, Any]:
    """A copy of ``data`` without the key that ``loc`` points into (copies only the path)."""
    model: type[BaseModel] = AdditionalConfig
    out = dict(data)
    node = out
    for index, part in enumerate(loc):
        if not isinstance(part, str) or part not in node:
            break
        info = model.model_fields.get(part)
        section = section_of(info.annotation) if info is not None else None
        child = node[part]
        if section is None or not isinstance(child, Mapping) or index == len(loc) - 1:
            del node[part]
            return out
        node[part] = dict(child)
        node = node[part]
        model = section
    # The location did not lead to a key (e.g. a union member); drop the whole top-level key.
    trimmed = dict(data)
    if loc and isinstance(loc[0], str):
        trimmed.pop(loc[0], None)
    return trimmed


def validate_best_effort(raw: Mapping[str, Any]) -> tuple[AdditionalConfig, list[Problem]]:
    """Validate ``raw``; return the config (offending keys defaulted) and every problem."""
    data: Mapping[str, Any] = raw
    problems: list[Problem] = []
    for round_no in range(_MAX_ROUNDS):
        try:
            return AdditionalConfig.model_validate(data), problems
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if round_no == 0:
                problems = [problem_from_error(e, AdditionalConfig) for e in errors]
            for error in errors:
                data = _without(data, tuple(error["loc"]))
    return AdditionalConfig.model_validate({}), problems
