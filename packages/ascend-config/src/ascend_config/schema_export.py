"""JSON Schema of ``additional_config`` (what ``ascend-config schema`` prints)."""

from __future__ import annotations

from typing import Any

from ascend_config.schema_top import RETIRED_KEYS, AdditionalConfig


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the accepted ``additional_config`` object."""
    schema = AdditionalConfig.model_json_schema(mode="validation")
    schema["title"] = "vLLM Ascend additional_config"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["x-retired-keys"] = dict(RETIRED_KEYS)
    return schema
