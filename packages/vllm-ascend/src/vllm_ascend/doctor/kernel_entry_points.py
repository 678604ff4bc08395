"""What the plugin's NPU kernels need from the installed CANN, as recorded from the torch-npu
wheel of this release (``tools/npu_seam/torch_npu-<version>.json``; a test fails when this
module and the record disagree).

- :data:`ACLNN`: the ``aclnn*`` entry points of CANN's operator library each torch_npu kernel
  the ``ascend`` ops call resolves at its first call (the calls the adapters make; names found
  in the wheel's ``libtorch_npu.so``);
- :data:`ASCEND_OPS`: the torch_npu kernels behind each ``torch.ops.ascend`` op and the plugin
  features that use it (an op whose entry point is missing runs its reference instead);
- :data:`TORCH_NPU_NEEDED`: the CANN libraries ``libtorch_npu.so`` links against (its ELF
  NEEDED entries): when one does not resolve, ``import torch_npu`` fails;
- :data:`TORCH_NPU_CANN`: the CANN release this torch-npu is built for (the one to install
  when an entry point is missing).
"""

from __future__ import annotations

from typing import Final

TORCH_NPU_VERSION: Final = "2.13.0"
TORCH_NPU_CANN: Final = "9.1.0"

ACLNN: Final[dict[str, tuple[str, ...]]] = {
    "aten.add": ("aclnnAdd",),
    "npu_add_rms_norm": ("aclnnAddRmsNorm",),
    "npu_add_rms_norm_dynamic_mx_quant": ("aclnnAddRmsNormDynamicMxQuant",),
    "npu_add_rms_norm_dynamic_quant": ("aclnnAddRmsNormDynamicQuantV2",),
    "npu_add_rms_norm_quant": ("aclnnAddRmsNormQuant",),
    "npu_dynamic_mx_quant": ("aclnnDynamicMxQuant",),
    "npu_dynamic_quant": ("aclnnDynamicQuant",),
    "npu_mrope": ("aclnnRopeWithSinCosCache",),
    "npu_quantize": ("aclnnAscendQuantV3",),
    "npu_rms_norm": ("aclnnRmsNorm",),
    "npu_rms_norm_dynamic_mx_quant": ("aclnnRmsNormDynamicMxQuant",),
    "npu_swiglu": ("aclnnSwiGlu",),
}

# ascend op -> (torch_npu kernels it calls, plugin features that use it)
ASCEND_OPS: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    "rms_norm": (("npu_rms_norm",), "RMSNorm of every model"),
    "add_rms_norm": (("npu_add_rms_norm",), "residual add + RMSNorm of every model"),
    "quantize": (("npu_quantize",), "static W8A8 quantization"),
    "dynamic_quant": (("npu_dynamic_quant",), "dynamic W8A8 quantization"),
    "add_rms_norm_quant": (("npu_add_rms_norm_quant",),
                           "the norm-quant fusion (fuse_norm_quant) of static W8A8 models"),
    "add_rms_norm_dynamic_quant": (("npu_add_rms_norm_dynamic_quant",),
                                   "the norm-quant fusion (fuse_norm_quant) of dynamic W8A8 "
                                   "models"),
    "dynamic_mx_quant": (("npu_dynamic_mx_quant",), "MXFP8 quantization (A5)"),
    "add_rms_norm_dynamic_mx_quant": (("npu_add_rms_norm_dynamic_mx_quant",),
                                      "the MXFP8 norm-quant fusion (A5)"),
    "rms_norm_dynamic_mx_quant": (("npu_rms_norm_dynamic_mx_quant",),
                                  "the MXFP8 norm-quant fusion (A5)"),
    "split_qkv_rmsnorm_rope": (("npu_rms_norm",),
                               "the QK-norm + RoPE fusion (fuse_qknorm_rope)"),
    "silu_and_mul": (("npu_swiglu",), "SiLU-and-mul of gated MLPs"),
    "mrotary_embedding": (("npu_mrope",), "multimodal rotary embedding (MRoPE)"),
    "muls_add": (("aten.add",), "the muls-add fusion (fuse_muls_add)"),
}

TORCH_NPU_NEEDED: Final[tuple[str, ...]] = (
    "libhccl.so", "libascendcl.so", "libacl_op_compiler.so", "libge_runner.so", "libgraph.so",
)


def entry_points_of(op: str) -> tuple[str, ...]:
    """The aclnn entry points ``torch.ops.ascend.<op>``'s NPU kernel needs."""
    kernels, _ = ASCEND_OPS[op]
    return tuple(name for kernel in kernels for name in ACLNN[kernel])


def missing_by_op(exported: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """``{ascend op: its entry points missing from exported}`` for the ops that miss any."""
    result: dict[str, tuple[str, ...]] = {}
    for op in ASCEND_OPS:
        missing = tuple(name for name in entry_points_of(op) if name not in exported)
        if missing:
            result[op] = missing
    return result
