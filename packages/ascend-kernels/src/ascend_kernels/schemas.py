"""The public ``torch.ops.ascend.*`` schemas: the operator namespace's contract.

Changing one of these strings changes a public interface; the package README records why.
"""

from __future__ import annotations

NAMESPACE = "ascend"

SCHEMAS: dict[str, str] = {
    "rms_norm": "(Tensor x, Tensor weight, float eps) -> Tensor",
    "add_rms_norm": (
        "(Tensor x, Tensor residual, Tensor weight, float eps, Tensor? bias=None)"
        " -> (Tensor out, Tensor residual_out)"
    ),
    "quantize": "(Tensor x, Tensor scale, Tensor offset) -> Tensor",
    "dynamic_quant": "(Tensor x) -> (Tensor q, Tensor scale)",
    "add_rms_norm_quant": (
        "(Tensor x, Tensor residual, Tensor weight, Tensor scale, Tensor offset,"
        " float eps, Tensor? bias=None) -> (Tensor q, Tensor residual_out)"
    ),
    "add_rms_norm_dynamic_quant": (
        "(Tensor x, Tensor residual, Tensor weight, float eps, Tensor? bias=None)"
        " -> (Tensor q, Tensor scale, Tensor residual_out)"
    ),
    "dynamic_mx_quant": "(Tensor x) -> (Tensor q, Tensor scale)",
    "add_rms_norm_dynamic_mx_quant": (
        "(Tensor x, Tensor residual, Tensor weight, float eps)"
        " -> (Tensor q, Tensor scale, Tensor residual_out)"
    ),
    "rms_norm_dynamic_mx_quant": (
        "(Tensor x, Tensor weight, float eps) -> (Tensor q, Tensor scale)"
    ),
    "rotary_embedding": (
        "(Tensor positions, Tensor q, Tensor k, Tensor cos_sin_cache, int head_size,"
        " int rotary_dim, bool is_neox) -> (Tensor q_out, Tensor k_out)"
    ),
    "split_qkv_rmsnorm_rope": (
        "(Tensor qkv, Tensor q_weight, Tensor k_weight, Tensor positions,"
        " Tensor cos_sin_cache, int q_size, int kv_size, int head_size, int rotary_dim,"
        " bool is_neox, float eps, Tensor? q_bias=None, Tensor? k_bias=None)"
        " -> (Tensor q, Tensor k, Tensor v)"
    ),
    "muls_add": "(Tensor x, Tensor y, float scale) -> Tensor",
    "bgmv_expand": (
        "(Tensor x, Tensor weight, Tensor indices, Tensor y, int slice_offset,"
        " int slice_size) -> Tensor"
    ),
    "sgmv_expand": (
        "(Tensor x, Tensor weight, Tensor lora_indices, Tensor seq_len, Tensor y,"
        " int slice_offset, int slice_size) -> Tensor"
    ),
    # Added for vLLM CustomOps the plugin replaces (README "Schema changes").
    "silu_and_mul": "(Tensor x) -> Tensor",
    "mrotary_embedding": (
        "(Tensor positions, Tensor q, Tensor k, Tensor cos_sin_cache, int head_size,"
        " int rotary_dim, int[] mrope_section, bool is_neox, bool interleaved)"
        " -> (Tensor q_out, Tensor k_out)"
    ),
}

OP_NAMES: tuple[str, ...] = tuple(SCHEMAS)


def qualname(op: str) -> str:
    """``"rms_norm"`` -> ``"ascend::rms_norm"``."""
    return f"{NAMESPACE}::{op}"
