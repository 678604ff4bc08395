"""Ascend replacements of vLLM's ``SiluAndMul`` and ``GemmaRMSNorm`` (CustomOp classes)."""
# GemmaRMSNorm is ascend.rms_norm / add_rms_norm with vLLM's float32 weight w + 1, called directly
# so Gemma's norms stay Ascend ops whatever IR provider priority the user configures.

from __future__ import annotations

import torch
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import GemmaRMSNorm


class AscendSiluAndMul(SiluAndMul):
    """``silu(x[..., :d]) * x[..., d:]`` through ``torch.ops.ascend.silu_and_mul``."""

    def forward_cpu(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.ascend.silu_and_mul(x)
        return out

    def forward_oot(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.ascend.silu_and_mul(x)
        return out


class AscendGemmaRMSNorm(GemmaRMSNorm):
    """Gemma RMSNorm (weight ``1 + w``, float32) via ``ascend.rms_norm`` / ``add_rms_norm``."""

    def _ascend_forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        weight = self.weight.float() + 1.0
        if residual is None:
            out: torch.Tensor = torch.ops.ascend.rms_norm(x, weight, self.variance_epsilon)
            return out
        normed, residual_out = torch.ops.ascend.add_rms_norm(
            x, residual, weight, self.variance_epsilon
        )
        return normed, residual_out

    def forward_cpu(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self._ascend_forward(x, residual)

    def forward_oot(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self._ascend_forward(x, residual)
