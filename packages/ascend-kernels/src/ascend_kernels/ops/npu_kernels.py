"""What each op's NPU adapter calls and where it runs, declared once, without torch.

:data:`NPU_SUPPORT` names, per op, the torch_npu kernels its adapter (``OpSpec.npu``) calls and
the SoCs, dtypes and head sizes it runs. Each :class:`NpuKernel` carries the ``aclnn*`` entry
points of CANN's operator library it resolves at its first call (names found in the torch-npu
wheel's ``libtorch_npu.so``, recorded in ``torch_npu_double/torch_npu-<version>.json``).
``capability.supports``, ``OpSpec.npu_support`` and the doctor's tables
(``vllm_ascend.doctor.kernel_entry_points``) are derived from it; a test runs every adapter
against the fake torch_npu and holds it to its kernels. The module imports neither torch nor
the rest of this package: the doctor loads it by path (its process never imports torch).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NpuKernel:
    """A kernel an adapter calls: a ``torch_npu`` attribute (``"<kernel>.out"`` names an
    overload), or ``"aten.<op>"`` for torch's own op dispatched to the NPU."""

    name: str
    aclnn: tuple[str, ...]

    @property
    def on_torch_npu(self) -> bool:
        """Whether the adapter reaches it through the ``torch_npu`` module."""
        return not self.name.startswith("aten.")


@dataclass(frozen=True)
class NpuSupport:
    """An op's NPU side: the kernels its adapter calls (``kernels``), those the runtime's graph
    capture of the op calls instead (``captured``, ``ascend_kernels.fia_graph``), where it runs
    (``socs``; ``dtypes`` by torch name; ``head_dims``, ``None``: any) and the plugin features
    that use it."""

    kernels: tuple[NpuKernel, ...]
    socs: frozenset[str]
    dtypes: frozenset[str]
    used_by: str
    head_dims: frozenset[int] | None = None
    captured: tuple[NpuKernel, ...] = ()

    @property
    def all_kernels(self) -> tuple[NpuKernel, ...]:
        """The adapter's kernels, then the captured ones."""
        return (*self.kernels, *self.captured)


FLOATS = frozenset({"float32", "bfloat16", "float16"})
HALVES = frozenset({"bfloat16", "float16"})
ALL_NPUS = frozenset({"A2", "A3", "A5", "310P"})
NOT_310P = frozenset({"A2", "A3", "A5"})
A5 = frozenset({"A5"})
A2_A3 = frozenset({"A2", "A3"})

ADD = NpuKernel("aten.add", ("aclnnAdd",))
RMS_NORM = NpuKernel("npu_rms_norm", ("aclnnRmsNorm",))
MROPE = NpuKernel("npu_mrope", ("aclnnRopeWithSinCosCache",))
# FIA: the functional form (eager), and the .out form with the workspace sized by
# _npu_fused_infer_attention_score_get_max_workspace (a captured graph's task).
FIA = NpuKernel("npu_fused_infer_attention_score", ("aclnnFusedInferAttentionScoreV4",))
FIA_OUT = NpuKernel("npu_fused_infer_attention_score.out", ("aclnnFusedInferAttentionScoreV4",))
FIA_MAX_WORKSPACE = NpuKernel("_npu_fused_infer_attention_score_get_max_workspace",
                              ("aclnnFusedInferAttentionScoreV4GetMaxWorkspaceSize",))


def _one(name: str, aclnn: str) -> tuple[NpuKernel, ...]:
    return (NpuKernel(name, (aclnn,)),)


_MX = "the MXFP8 norm-quant fusion (A5)"

#: Op -> its NPU side. The reasons for the SoC and dtype limits are in ``capability``'s
#: docstring.
NPU_SUPPORT: dict[str, NpuSupport] = {
    "rms_norm": NpuSupport((RMS_NORM,), ALL_NPUS, FLOATS, "RMSNorm of every model"),
    "add_rms_norm": NpuSupport(_one("npu_add_rms_norm", "aclnnAddRmsNorm"), ALL_NPUS, FLOATS,
                               "residual add + RMSNorm of every model"),
    "quantize": NpuSupport(_one("npu_quantize", "aclnnAscendQuantV3"), ALL_NPUS, FLOATS,
                           "static W8A8 quantization"),
    "dynamic_quant": NpuSupport(_one("npu_dynamic_quant", "aclnnDynamicQuant"), ALL_NPUS,
                                HALVES, "dynamic W8A8 quantization"),
    "add_rms_norm_quant": NpuSupport(
        _one("npu_add_rms_norm_quant", "aclnnAddRmsNormQuant"), NOT_310P, HALVES,
        "the norm-quant fusion (fuse_norm_quant) of static W8A8 models"),
    "add_rms_norm_dynamic_quant": NpuSupport(
        _one("npu_add_rms_norm_dynamic_quant", "aclnnAddRmsNormDynamicQuantV2"), NOT_310P,
        HALVES, "the norm-quant fusion (fuse_norm_quant) of dynamic W8A8 models"),
    "dynamic_mx_quant": NpuSupport(_one("npu_dynamic_mx_quant", "aclnnDynamicMxQuant"), A5,
                                   HALVES, "MXFP8 quantization (A5)"),
    "add_rms_norm_dynamic_mx_quant": NpuSupport(
        _one("npu_add_rms_norm_dynamic_mx_quant", "aclnnAddRmsNormDynamicMxQuant"), A5, HALVES,
        _MX),
    "rms_norm_dynamic_mx_quant": NpuSupport(
        _one("npu_rms_norm_dynamic_mx_quant", "aclnnRmsNormDynamicMxQuant"), A5, HALVES, _MX),
    # npu_mrope in rope mode; upstream keeps ATB rope on 310P, which this plugin does not call
    "rotary_embedding": NpuSupport((MROPE,), NOT_310P, FLOATS, "rotary embedding"),
    "split_qkv_rmsnorm_rope": NpuSupport(
        (RMS_NORM, MROPE), NOT_310P, frozenset({"bfloat16"}),
        "the QK-norm + RoPE fusion (fuse_qknorm_rope)", head_dims=frozenset({64, 128})),
    "muls_add": NpuSupport((ADD,), ALL_NPUS, FLOATS, "the muls-add fusion (fuse_muls_add)"),
    # the LoRA expand kernels come from the compiled custom-op extension, not torch_npu
    "bgmv_expand": NpuSupport((), frozenset({"A2", "A3", "310P"}), HALVES, "LoRA"),
    "sgmv_expand": NpuSupport((), frozenset({"A2", "A3", "310P"}), HALVES, "LoRA"),
    "silu_and_mul": NpuSupport(_one("npu_swiglu", "aclnnSwiGlu"), ALL_NPUS, FLOATS,
                               "SiLU-and-mul of gated MLPs"),
    # vllm-ascend keeps a separate 310P MRoPE path
    "mrotary_embedding": NpuSupport((MROPE,), NOT_310P, FLOATS,
                                    "multimodal rotary embedding (MRoPE)"),
    # the torch-npu docs list A2 and A3 for both; FIA's query is float16/bfloat16
    "paged_attention": NpuSupport((FIA,), A2_A3, HALVES, "the attention of every NPU request",
                                  captured=(FIA_MAX_WORKSPACE, FIA_OUT)),
    "reshape_and_cache": NpuSupport(_one("npu_scatter_pa_kv_cache", "aclnnScatterPaKvCache"),
                                    A2_A3, FLOATS, "the KV-cache write of every NPU request"),
}
