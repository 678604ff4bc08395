"""Shared pieces of the pydantic schema: the strict, frozen base model and field helpers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
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
JsonObject = dict[StrictStr, Any]


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


NonNegInt = Annotated[StrictInt, Field(ge=0)]
PosInt = Annotated[StrictInt, Field(gt=0)]
