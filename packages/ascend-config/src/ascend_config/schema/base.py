"""Shared pieces of the pydantic schema: the strict, frozen base model and field helpers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from ascend_config.inputs import scan, text_problem
from ascend_config.limits import MAX_CONFIG_VALUES, MAX_DEPTH, MAX_PATH_CHARS


def _valid_text(value: str) -> str:
    # Every string ends up in to_json(); an unpaired surrogate cannot be written as UTF-8.
    why = text_problem(value)
    if why:
        raise ValueError(f"must be valid text: {why}")
    return value


def _valid_path(value: str) -> str:
    why = text_problem(value, is_path=True, max_chars=MAX_PATH_CHARS)
    if why:
        raise ValueError(f"must be a usable path: {why}")
    return value


def _plain_json(value: Any) -> Any:
    # Free-form objects (dump_config, method_params) must survive to_json/from_json unchanged:
    # plain JSON types only, finite numbers, valid text, bounded depth and size.
    found = scan(value, max_depth=MAX_DEPTH, max_values=MAX_CONFIG_VALUES, json_only=True)
    if found is not None:
        raise ValueError(found.text())
    return value


# Strict scalars: JSON true is not 1, "1" is not 1, 1.0 is not 1; floats accept integers.
Bool = StrictBool
Int = StrictInt
Float = StrictFloat
Str = Annotated[StrictStr, AfterValidator(_valid_text)]
PathStr = Annotated[StrictStr, AfterValidator(_valid_path)]
"""A file-system path: valid text, no NUL byte, at most ``MAX_PATH_CHARS`` characters."""

JsonObject = Annotated[dict[StrictStr, Any], AfterValidator(_plain_json)]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        validate_default=False,
        hide_input_in_errors=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_section_means_defaults(cls, data: Any) -> Any:
        # A nested section given as null (e.g. "scheduler_config": null) takes its defaults.
        if isinstance(data, dict) and any(v is None for v in data.values()):
            fields = cls.model_fields
            return {k: v for k, v in data.items()
                    if not (v is None and k in fields and fields[k].default_factory is not None)}
        return data


def opt(
    default: Any,
    description: str,
    *,
    env: str | None = None,
    allowed: str | None = None,
    **constraints: Any,
) -> Any:
    """A documented field; ``env`` names the deprecated env-var fallback, ``allowed`` the
    human wording of the allowed values when it is not obvious from type and constraints."""
    extra: dict[str, Any] = {}
    if env:
        extra["env"] = env
    if allowed:
        extra["allowed"] = allowed
    return Field(default, description=description, json_schema_extra=extra or None, **constraints)


def sub(model: type[Section], description: str) -> Any:
    """A nested section field (defaults to the section's defaults)."""
    return Field(default_factory=model, description=description)


def _require_int(value: Any) -> Any:
    # Literal[0, 1] alone would accept True for 1 and 1.0 for 1; these keys are integers.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


RequireInt = BeforeValidator(_require_int)
