"""`vllm-ascend serve`: a config vLLM's pydantic validation refuses is one line (its reason)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError, field_validator
from pydantic.dataclasses import dataclass
from vllm_ascend.entrypoints.serve import config_error


@dataclass
class _Config:
    heads: int

    @field_validator("heads")
    @classmethod
    def _divisible(cls, heads: int) -> int:
        if heads % 2:
            raise ValueError(f"Total number of attention heads ({heads}) must be divisible\n"
                             "by tensor parallel size (2).")
        return heads


def test_the_reason_of_a_refused_config_is_one_line_without_pydantic_framing() -> None:
    _Config(heads=8)  # accepted
    with pytest.raises(ValidationError) as info:
        _Config(heads=9)
    assert config_error(info.value) == (
        "Total number of attention heads (9) must be divisible by tensor parallel size (2).")
