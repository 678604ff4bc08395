"""Kernel capability questions, answered by `ascend_kernels.supports` when it is available."""

from __future__ import annotations

from typing import Any

import torch

SOCS = ("A2", "A3", "A5", "310P", "cpu")

# Used only when the installed ascend_kernels predates `supports`: the conservative facts of
# the existing plugin (MX quantisation only on A5, the fused q/k-norm+rope kernel for head size
# 128, norm+quant fusions not on 310P). The "cpu" SoC runs reference kernels: all supported.
_FALLBACK_MX_SOCS = frozenset({"A5", "cpu"})


def check_soc(soc: str) -> str:
    if soc not in SOCS:
        raise ValueError(f"soc {soc!r} is not a known SoC; allowed: {', '.join(SOCS)}")
    return soc


def supports(
    op: str, *, dtype: torch.dtype | None = None, head_dim: int | None = None, soc: str = "cpu"
) -> bool:
    """Whether kernel `op` (name without namespace) runs for this dtype/head size on `soc`."""
    try:
        from ascend_kernels import supports as kernel_supports
    except ImportError:
        return _fallback(op, head_dim=head_dim, soc=soc)
    kwargs: dict[str, Any] = {"soc": soc}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if head_dim is not None:
        kwargs["head_dim"] = head_dim
    return bool(kernel_supports(op, **kwargs))


def _fallback(op: str, *, head_dim: int | None, soc: str) -> bool:
    if soc == "cpu":
        return True
    if "mx_quant" in op:
        return soc in _FALLBACK_MX_SOCS
    if op == "split_qkv_rmsnorm_rope":
        return head_dim is None or head_dim == 128
    return not (op.startswith(("add_rms_norm_", "rms_norm_")) and soc == "310P")
