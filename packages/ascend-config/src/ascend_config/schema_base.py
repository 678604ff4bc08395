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

# Strict scalars: JSON true is not 1, "1" is not 1, 1.0 is not 1; floats accept integers.
Bool = StrictBool
Int = StrictInt
Float = StrictFloat
Str = StrictStr
MAX_JSON_DEPTH = 32


def _plain_json(value: Any, depth: int = 0) -> Any:
    # Free-form objects (dump_config, method_params) must survive to_json/from_json unchanged:
    # plain JSON types only, finite numbers, bounded depth.
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError("object keys must be strings")
            _plain_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _plain_json(item, depth + 1)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("numbers must be finite (no NaN or Infinity)")
    elif value is not None and not isinstance(value, (bool, int, str)):
        raise ValueError(f"{type(value).__name__} is not a JSON value")
    return value


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
