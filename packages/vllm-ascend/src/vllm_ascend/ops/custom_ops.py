"""The one map of vLLM CustomOps vllm-ascend replaces (one row per class name), and its
registration.
"""
# vLLM keys its out-of-tree registry by the instantiated class's own name, so each variant has a
# row. Rotary classes not replaced: DualChunkRotaryEmbedding (returns five query variants),
# DeepseekV4ScalingRotaryEmbedding (its forward is never called), Llama4VisionRotaryEmbedding
# (complex form) and MRotaryEmbeddingInterleaved (openPangu only).

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vllm.model_executor.custom_op import op_registry_oot

from vllm_ascend.ops.activation_norm import AscendGemmaRMSNorm, AscendSiluAndMul
from vllm_ascend.ops.moe import AscendUnquantizedFusedMoEMethod
from vllm_ascend.ops.rotary import (
    AscendDeepseekScalingRotaryEmbedding,
    AscendDynamicNTKAlphaRotaryEmbedding,
    AscendDynamicNTKScalingRotaryEmbedding,
    AscendLinearScalingRotaryEmbedding,
    AscendLlama3RotaryEmbedding,
    AscendMRotaryEmbedding,
    AscendNTKScalingRotaryEmbedding,
    AscendRotaryEmbedding,
    AscendYaRNScalingRotaryEmbedding,
)


@dataclass(frozen=True)
class CustomOpRow:
    """One replacement: vLLM class name -> Ascend class, and the ascend ops it calls."""

    name: str
    replacement: type
    ascend_ops: tuple[str, ...]
    used_by: str

    @property
    def replaced(self) -> type:
        """The vLLM class this row replaces (the replacement's base of that name)."""
        for base in self.replacement.__mro__[1:]:
            if base.__name__ == self.name:
                return base
        raise TypeError(
            f"{self.replacement.__qualname__} must subclass vLLM's {self.name} to replace it"
        )


_ROPE = ("rotary_embedding",)

#: Every vLLM CustomOp vllm-ascend replaces (README "CustomOps replaced" mirrors this table).
ASCEND_CUSTOM_OPS: tuple[CustomOpRow, ...] = (
    CustomOpRow("RotaryEmbedding", AscendRotaryEmbedding, _ROPE, "default rope (all families)"),
    CustomOpRow("Llama3RotaryEmbedding", AscendLlama3RotaryEmbedding, _ROPE,
                "rope_type llama3 (Llama 3.1+, Llama 4)"),
    CustomOpRow("YaRNScalingRotaryEmbedding", AscendYaRNScalingRotaryEmbedding, _ROPE,
                "rope_type yarn (Qwen2/3, Llama)"),
    CustomOpRow("LinearScalingRotaryEmbedding", AscendLinearScalingRotaryEmbedding, _ROPE,
                "rope_type linear"),
    CustomOpRow("NTKScalingRotaryEmbedding", AscendNTKScalingRotaryEmbedding, _ROPE,
                "rope_type ntk"),
    CustomOpRow("DynamicNTKScalingRotaryEmbedding", AscendDynamicNTKScalingRotaryEmbedding,
                _ROPE, "rope_type dynamic with factor (Llama, Qwen)"),
    CustomOpRow("DynamicNTKAlphaRotaryEmbedding", AscendDynamicNTKAlphaRotaryEmbedding, _ROPE,
                "rope_type dynamic with alpha"),
    CustomOpRow("DeepseekScalingRotaryEmbedding", AscendDeepseekScalingRotaryEmbedding, _ROPE,
                "deepseek_yarn (DeepSeek V2/V3 MLA)"),
    CustomOpRow("MRotaryEmbedding", AscendMRotaryEmbedding, ("mrotary_embedding",),
                "mrope_section (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)"),
    CustomOpRow("SiluAndMul", AscendSiluAndMul, ("silu_and_mul",),
                "SwiGLU MLPs (all families)"),
    CustomOpRow("GemmaRMSNorm", AscendGemmaRMSNorm, ("rms_norm", "add_rms_norm"),
                "x * (1 + w) norms (Gemma, Qwen3-Next)"),
    CustomOpRow("UnquantizedFusedMoEMethod", AscendUnquantizedFusedMoEMethod, (),
                "MoE experts with expert-parallel dispatch on the host CPU (vllm_ascend::"
                "moe_routed_experts); vLLM's own path on NPU"),
)


def _rows(rows: Iterable[CustomOpRow] | None) -> tuple[CustomOpRow, ...]:
    return ASCEND_CUSTOM_OPS if rows is None else tuple(rows)


def register_ascend_custom_ops(rows: Iterable[CustomOpRow] | None = None) -> list[str]:
    """Register every Ascend replacement not yet registered; returns the names registered now. A
    name another package already registered is an error naming both."""
    import ascend_kernels  # noqa: F401 - registers torch.ops.ascend.*

    done = []
    for row in _rows(rows):
        current = op_registry_oot.get(row.name)
        if current is row.replacement:
            continue
        if current is not None:
            raise RuntimeError(
                f"vLLM custom op {row.name!r} is already replaced by {current.__module__}."
                f"{current.__qualname__}; vllm-ascend cannot register "
                f"{row.replacement.__qualname__}"
            )
        row.replaced.register_oot(row.replacement, name=row.name)  # type: ignore[attr-defined]
        done.append(row.name)
    return done


def reset_ascend_custom_ops(rows: Iterable[CustomOpRow] | None = None) -> None:
    """Remove the Ascend classes from vLLM's out-of-tree registry (tests)."""
    for row in _rows(rows):
        if op_registry_oot.get(row.name) is row.replacement:
            del op_registry_oot[row.name]


def native_directives(rows: Iterable[CustomOpRow] | None = None) -> list[str]:
    """``custom_ops`` entries that switch every Ascend replacement off (vLLM's native code)."""
    return [f"-{row.name}" for row in _rows(rows)]


def all_custom_ops(current: Sequence[str] | None) -> list[str]:
    """``["all"]`` plus the user's own ``+name``/``-name`` directives from ``current``."""
    directives = [d for d in (current or []) if d[:1] in ("+", "-") and len(d) > 1]
    return ["all", *dict.fromkeys(directives)]
