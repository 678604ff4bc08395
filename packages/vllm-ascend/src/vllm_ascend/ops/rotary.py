"""Ascend replacements of vLLM's rotary embeddings (CustomOp out-of-tree classes)."""
# Each subclasses the class it replaces: vLLM's __new__ returns the replacement and the original
# __init__ then computes the variant's cos_sin_cache.

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.layers.rotary_embedding import (
    DeepseekScalingRotaryEmbedding,
    DynamicNTKAlphaRotaryEmbedding,
    DynamicNTKScalingRotaryEmbedding,
    LinearScalingRotaryEmbedding,
    Llama3RotaryEmbedding,
    MRotaryEmbedding,
    NTKScalingRotaryEmbedding,
    RotaryEmbedding,
    YaRNScalingRotaryEmbedding,
)

RopeOutput = tuple[torch.Tensor, torch.Tensor | None]


class AscendRopeForward:
    """``forward_cpu``/``forward_oot`` of a vLLM rotary class through
    ``ascend.rotary_embedding``."""

    head_size: int
    rotary_dim: int
    is_neox_style: bool

    def _ascend_forward(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> RopeOutput:
        if key is None:
            return self._native(positions, query, key, offsets)
        if offsets is not None:  # DeepSeek scaling: per-token offsets into the cache
            positions = positions + offsets
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)  # type: ignore[attr-defined]
        q_out, k_out = torch.ops.ascend.rotary_embedding(
            positions, query, key, cos_sin_cache, self.head_size, self.rotary_dim,
            self.is_neox_style,
        )
        return q_out, k_out

    def _native(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None,
        offsets: torch.Tensor | None,
    ) -> RopeOutput:
        native: Any = self.forward_native  # type: ignore[attr-defined]
        if offsets is None:
            return native(positions, query, key)  # type: ignore[no-any-return]
        return native(positions, query, key, offsets)  # type: ignore[no-any-return]

    def forward_cpu(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> RopeOutput:
        return self._ascend_forward(positions, query, key, offsets)

    def forward_oot(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> RopeOutput:
        return self._ascend_forward(positions, query, key, offsets)


class AscendRotaryEmbedding(AscendRopeForward, RotaryEmbedding):
    """Plain rope (``rope_type`` default)."""


class AscendLlama3RotaryEmbedding(AscendRopeForward, Llama3RotaryEmbedding):
    """``rope_type`` llama3 (Llama 3.1+ frequency smoothing)."""


class AscendYaRNScalingRotaryEmbedding(AscendRopeForward, YaRNScalingRotaryEmbedding):
    """``rope_type`` yarn (Qwen, Llama long-context checkpoints)."""


class AscendLinearScalingRotaryEmbedding(AscendRopeForward, LinearScalingRotaryEmbedding):
    """``rope_type`` linear (positions interpolated; LoRA scaling offsets come in positions)."""


class AscendNTKScalingRotaryEmbedding(AscendRopeForward, NTKScalingRotaryEmbedding):
    """``rope_type`` ntk."""


class AscendDynamicNTKScalingRotaryEmbedding(
    AscendRopeForward, DynamicNTKScalingRotaryEmbedding
):
    """``rope_type`` dynamic with ``factor``."""


class AscendDynamicNTKAlphaRotaryEmbedding(AscendRopeForward, DynamicNTKAlphaRotaryEmbedding):
    """``rope_type`` dynamic with ``alpha``."""


class AscendDeepseekScalingRotaryEmbedding(AscendRopeForward, DeepseekScalingRotaryEmbedding):
    """DeepSeek V2/V3 YaRN (``deepseek_yarn``): GPT-J pairs on ``[T, heads, rope_dim]``."""


class AscendMRotaryEmbedding(MRotaryEmbedding):
    """Qwen-VL multimodal rope through ``torch.ops.ascend.mrotary_embedding``."""

    def _ascend_forward(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
    ) -> RopeOutput:
        if key is None:
            return self.forward_native(positions, query, key)
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        section = [int(s) for s in (self.mrope_section or (0, 0, 0))]
        q_out, k_out = torch.ops.ascend.mrotary_embedding(
            positions, query, key, cos_sin_cache, self.head_size, self.rotary_dim, section,
            self.is_neox_style, bool(self.mrope_interleaved),
        )
        return q_out, k_out

    # vLLM's MRoPE forwards take ``offsets`` and ignore them; so do these.
    def forward_cpu(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> RopeOutput:
        return self._ascend_forward(positions, query, key)

    def forward_oot(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> RopeOutput:
        return self._ascend_forward(positions, query, key)
