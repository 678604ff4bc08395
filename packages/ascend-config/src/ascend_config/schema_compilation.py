"""Graph compilation, fusion and xlite sections."""

from __future__ import annotations

from ascend_config.schema_base import Bool, Section, opt

COMPILATION_PASS_SWITCHES = (
    "fuse_norm_quant", "fuse_qknorm_rope", "fuse_muls_add", "fuse_kv_cache_attention",
)


class AscendCompilationConfig(Section):
    """Graph-mode compilation switches (fusion passes, npugraph_ex, static kernel)."""

    enable_npugraph_ex: Bool = opt(
        True, "compile graphs with the NPU graph extension (forced off on 310P and in eager mode)")
    enable_static_kernel: Bool = opt(
        False, "static kernels; needs enable_npugraph_ex (forced off on 310P and in eager mode)")
    fuse_norm_quant: Bool = opt(True, "fusion pass: AddRMSNorm + quantize into one op")
    fuse_qknorm_rope: Bool = opt(True, "fusion pass: q/k RMSNorm + RoPE into one op")
    fuse_muls_add: Bool = opt(True, "fusion pass: x * scale + y into one muls_add op")
    fuse_kv_cache_attention: Bool = opt(
        True, "fusion pass: an attention layer's KV-cache write and attention in one op call")

    def pass_switches(self) -> dict[str, bool]:
        """The fusion-pass switches as keyword arguments for the pass manager."""
        return {name: bool(getattr(self, name)) for name in COMPILATION_PASS_SWITCHES}


class AscendFusionConfig(Section):
    """Fused-operator switches used by model code."""

    fusion_ops_gmmswigluquant: Bool = opt(True, "fused grouped-matmul + SwiGLU + quantize op")


class XliteGraphConfig(Section):
    """Xlite graph mode (decode graphs run by the xlite worker)."""

    enabled: Bool = opt(False, "run decode through xlite graphs (selects the xlite worker)")
    full_mode: Bool = opt(
        False, "xlite full mode: without spec decode the engine runs eager with xlite graphs")


def compilation_defaults() -> dict[str, bool]:
    """Default fusion-pass switches: ``{"fuse_norm_quant": True, ...}``."""
    return AscendCompilationConfig().pass_switches()
