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
from ascend_config.limits import MAX_REPORTED_PROBLEMS
from ascend_config.schema.introspect import allowed_text, field_at, section_of, suggest
from ascend_config.schema.spelling import string_fix
from ascend_config.schema.top import AdditionalConfig

_MAX_ROUNDS = 4
# Errors that mean "wrong scalar type" (RequireInt raises value_error); a string there gets
# the one-line fix of schema.spelling.
_SCALAR_ERRORS = frozenset({"bool_type", "int_type", "float_type", "literal_error",
                            "value_error", "bool_parsing", "int_parsing", "float_parsing"})


def problem_from_error(error: ErrorDetails, root: type[BaseModel]) -> Problem:
    """One pydantic error as one problem line."""
    loc = tuple(error["loc"])
    path = render_path(loc)
    value = error.get("input")
    kind = error["type"]
    if kind == "extra_forbidden":
        # field_at stops at the unknown key, inside the section that should hold it.
        parent, _, _ = field_at(loc)
        guess = suggest(str(loc[-1]), parent)
        allowed = f"did you mean '{guess}'?" if guess else "a key listed by `ascend-config explain`"
        return make_problem(path, value, allowed, "unknown key")
    message = error["msg"].removeprefix("Value error, ")
    if root is AdditionalConfig:
        _, info, _ = field_at(loc)
        allowed = allowed_text(info) if info is not None else "see the schema"
        if isinstance(value, str) and info is not None and kind in _SCALAR_ERRORS:
            fix = string_fix(path, value, info)
            if fix is not None:
                return make_problem(path, value, fix[1], fix[0])
    else:
        allowed = "a value written by AscendConfig.to_json"
    if kind in ("model_type", "dict_type"):
        message = "must be a JSON object"
    return make_problem(path, value, allowed, message)


def problems_from_validation(
    exc: ValidationError, root: type[BaseModel], limit: int = MAX_REPORTED_PROBLEMS
) -> tuple[list[Problem], int]:
    """The first ``limit`` errors of ``exc`` as problems, and how many more there were.

    Only the listed errors are rendered (with their did-you-mean), so the cost of a config
    with 50,000 unknown keys is one pass over its errors.
    """
    errors = exc.errors(include_url=False)
    return [problem_from_error(e, root) for e in errors[:limit]], max(0, len(errors) - limit)


def _drop(data: Mapping[str, Any], locs: list[tuple[int | str, ...]],
          model: type[BaseModel]) -> dict[str, Any] | None:
    """A copy of ``data`` without every key the error locations point into.

    A location inside a nested section drops only the key in that section (the section keeps
    its other keys); a location that leads to no key here gives None, so the caller drops the
    whole section. Only the dicts on the way are copied, each once: linear in the errors.
    """
    by_key: dict[object, list[tuple[int | str, ...]]] = {}
    non_str: dict[str, object] | None = None
    for loc in locs:
        key: object = loc[0] if loc else None
        if loc and key not in data:
            # pydantic names a non-string key in the location by its repr() (None, 1.5,
            # Decimal('1.0')); an int (or bool) key stays a number, which `in data` finds.
            if non_str is None:
                non_str = {repr(k): k for k in data if not isinstance(k, str)}
            key = non_str.get(str(key), key)
        if not loc or key not in data:
            return None
        by_key.setdefault(key, []).append(loc[1:])
    out: dict[Any, Any] = dict(data)
    for key, rests in by_key.items():
        info = model.model_fields.get(key) if isinstance(key, str) else None
        section = section_of(info.annotation) if info is not None else None
        child = out[key]
        trimmed = None
        if section is not None and isinstance(child, Mapping) and all(rests):
            trimmed = _drop(child, rests, section)
        if trimmed is None:
            del out[key]
        else:
            out[key] = trimmed
    return out


def validate_best_effort(
    raw: Mapping[str, Any],
) -> tuple[AdditionalConfig, list[Problem], int]:
    """Validate ``raw``; return the config (offending keys defaulted), the first problems
    (at most MAX_REPORTED_PROBLEMS) and how many more problems there were."""
    data: Mapping[str, Any] = raw
    problems: list[Problem] = []
    omitted = 0
    for round_no in range(_MAX_ROUNDS):
        try:
            return AdditionalConfig.model_validate(data), problems, omitted
        except ValidationError as exc:
            if round_no == 0:
                problems, omitted = problems_from_validation(exc, AdditionalConfig)
            locs = [tuple(e["loc"]) for e in exc.errors(include_url=False)]
            data = _drop(data, locs, AdditionalConfig) or {}
    return AdditionalConfig.model_validate({}), problems, omitted
