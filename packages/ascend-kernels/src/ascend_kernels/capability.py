"""``supports(op, dtype=, head_dim=, soc=)``: may a pass insert ``ascend::<op>`` here?

The reference implementations (soc ``"cpu"``) run every op for float32, bfloat16 and float16
with any head size. On an NPU the answer is the op's declared ``OpSpec.npu_support``
(``ops/npu_kernels.py``), which restates what the existing vllm-ascend plugin relies on (its
``utils.py`` helpers and its fusion patterns):
- the qk-norm + rope kernel (vllm-ascend's Triton ``split_qkv_rmsnorm_rope``, ``_simt`` on A5)
  is bfloat16 only (it casts to ``tl.bfloat16``) and loads a head with
  ``tl.arange(0, HEAD_DIM)``, which needs a power of two; the upstream fusion pass enables it
  only for ``head_size == 128``. We allow 64 and 128: the sizes of the models
  this plugin targets that satisfy the kernel's constraint;
- the MX fp8 kernels (``npu_dynamic_mx_quant`` and its RMSNorm fusions) exist on A5 only;
- the add+RMSNorm+quant fusions are used for bfloat16/float16 models;
- the LoRA expand kernels come from the compiled custom-op extension, which A5 disables;
- rope runs ``npu_mrope`` (rope mode), as upstream does on A2/A3 since it left ATB's
  ``_npu_rotary_embedding`` (static first-call caches, fp16/bf16 only); upstream keeps ATB
  rope on 310P, which this plugin does not call;
- 310P has no bfloat16 support, and the fused quant / rope kernels are not used there.
An op without ``npu_support`` is unsupported on an NPU (a pass then keeps the unfused graph).
"""

from __future__ import annotations

import torch

from ascend_kernels.ops import OP_NAMES, SPECS

SOCS = ("A2", "A3", "A5", "310P", "cpu")
FLOAT_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


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
    support = SPECS[name].npu_support
    if support is None or soc not in support.socs:
        return False
    if soc == "310P" and resolved == torch.bfloat16:
        return False
    if resolved is not None and str(resolved).removeprefix("torch.") not in support.dtypes:
        return False
    return head_dim is None or support.head_dims is None or head_dim in support.head_dims
