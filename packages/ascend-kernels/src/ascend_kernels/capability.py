"""``supports(op, dtype=, head_dim=, soc=)``: may a pass insert ``ascend::<op>`` here?

The reference implementations (soc ``"cpu"``) run every op for float32, bfloat16 and float16
with any head size. The NPU rows restate what the existing vllm-ascend plugin relies on
(its ``utils.py`` helpers and its fusion patterns):
- the qk-norm + rope kernel (vllm-ascend's Triton ``split_qkv_rmsnorm_rope``, ``_simt`` on A5)
  is bfloat16 only (it casts to ``tl.bfloat16``) and loads a head with
  ``tl.arange(0, HEAD_DIM)``, which needs a power of two; the upstream fusion pass enables it
  only for ``head_size == 128``. We allow 64 and 128: the sizes of the models
  this plugin targets that satisfy the kernel's constraint;
- the MX fp8 kernels (``npu_dynamic_mx_quant`` and its RMSNorm fusions) exist on A5 only;
- the add+RMSNorm+quant fusions are used for bfloat16/float16 models;
- the LoRA expand kernels come from the compiled custom-op extension, which A5 disables;
- 310P has no bfloat16 support, and the fused quant / rope kernels are not used there.
Anything not listed is treated as unsupported on an NPU (a pass then keeps the unfused graph).
"""

from __future__ import annotations

import torch

from ascend_kernels.ops import OP_NAMES

SOCS = ("A2", "A3", "A5", "310P", "cpu")
FLOAT_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})
HALF_DTYPES = frozenset({torch.bfloat16, torch.float16})

# op -> (socs, dtypes, head sizes or None for any)
_NPU_TABLE: dict[str, tuple[frozenset[str], frozenset[torch.dtype], frozenset[int] | None]] = {
    "rms_norm": (frozenset({"A2", "A3", "A5", "310P"}), FLOAT_DTYPES, None),
    "add_rms_norm": (frozenset({"A2", "A3", "A5", "310P"}), FLOAT_DTYPES, None),
    "quantize": (frozenset({"A2", "A3", "A5", "310P"}), FLOAT_DTYPES, None),
    "dynamic_quant": (frozenset({"A2", "A3", "A5", "310P"}), HALF_DTYPES, None),
    "add_rms_norm_quant": (frozenset({"A2", "A3", "A5"}), HALF_DTYPES, None),
    "add_rms_norm_dynamic_quant": (frozenset({"A2", "A3", "A5"}), HALF_DTYPES, None),
    "dynamic_mx_quant": (frozenset({"A5"}), HALF_DTYPES, None),
    "add_rms_norm_dynamic_mx_quant": (frozenset({"A5"}), HALF_DTYPES, None),
    "rms_norm_dynamic_mx_quant": (frozenset({"A5"}), HALF_DTYPES, None),
    # rope runs npu_mrope (rope mode), as upstream does on A2/A3 since it left ATB's
    # _npu_rotary_embedding (static first-call caches, fp16/bf16 only); 310P keeps ATB rope
    # upstream, which this plugin does not call.
    "rotary_embedding": (frozenset({"A2", "A3", "A5"}), FLOAT_DTYPES, None),
    "split_qkv_rmsnorm_rope": (
        frozenset({"A2", "A3", "A5"}),
        frozenset({torch.bfloat16}),
        frozenset({64, 128}),
    ),
    "muls_add": (frozenset({"A2", "A3", "A5", "310P"}), FLOAT_DTYPES, None),
    "bgmv_expand": (frozenset({"A2", "A3", "310P"}), HALF_DTYPES, None),
    "sgmv_expand": (frozenset({"A2", "A3", "310P"}), HALF_DTYPES, None),
    # npu_swiglu exists on every SoC; npu_mrope is not used on 310P (vllm-ascend keeps a
    # separate 310P MRoPE path there).
    "silu_and_mul": (frozenset({"A2", "A3", "A5", "310P"}), FLOAT_DTYPES, None),
    "mrotary_embedding": (frozenset({"A2", "A3", "A5"}), FLOAT_DTYPES, None),
    # npu_fused_infer_attention_score / npu_scatter_pa_kv_cache: the torch-npu docs list
    # A2 and A3 (FIA's query float16/bfloat16; float32 runs the reference).
    "paged_attention": (frozenset({"A2", "A3"}), HALF_DTYPES, None),
    "reshape_and_cache": (frozenset({"A2", "A3"}), FLOAT_DTYPES, None),
}


def _dtype(value: torch.dtype | str | None) -> torch.dtype | None:
    if value is None or isinstance(value, torch.dtype):
        return value
    resolved = getattr(torch, value, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype {value!r} is not a torch dtype name (e.g. 'bfloat16')")
    return resolved


def supports(
    op: str,
    *,
    dtype: torch.dtype | str | None = None,
    head_dim: int | None = None,
    soc: str | None = None,
) -> bool:
    """True when ``ascend::<op>`` runs for ``dtype``/``head_dim`` on ``soc``.

    ``op`` is an op name (``"split_qkv_rmsnorm_rope"``, ``"ascend::muls_add"`` also accepted);
    ``dtype`` is the activation (model) dtype; ``None`` arguments are not constrained, except
    ``soc=None`` which means ``"cpu"`` (the reference kernels). Raises ``ValueError`` for an
    unknown op or SoC.
    """
    name = op.removeprefix("ascend::")
    if name not in OP_NAMES:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OP_NAMES)}")
    soc = "cpu" if soc is None else soc
    if soc not in SOCS:
        raise ValueError(f"unknown soc {soc!r}; allowed: {', '.join(SOCS)}")
    resolved = _dtype(dtype)
    if head_dim is not None and head_dim <= 0:
        raise ValueError(f"head_dim must be positive, got {head_dim}")
    if soc == "cpu":
        return resolved is None or resolved in FLOAT_DTYPES
    socs, dtypes, head_dims = _NPU_TABLE[name]
    if soc not in socs:
        return False
    if soc == "310P" and resolved == torch.bfloat16:
        return False
    if resolved is not None and resolved not in dtypes:
        return False
    return head_dim is None or head_dims is None or head_dim in head_dims
