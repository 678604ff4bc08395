"""Kernel capability questions, answered by `ascend_kernels.supports` (the kernels package
owns the table of which op runs for which dtype and head size on which SoC)."""

from __future__ import annotations

import torch

SOCS = ("A2", "A3", "A5", "310P", "cpu")


def check_soc(soc: str) -> str:
    if soc not in SOCS:
        raise ValueError(f"soc {soc!r} is not a known SoC; allowed: {', '.join(SOCS)}")
    return soc


def supports(
    op: str, *, dtype: torch.dtype | None = None, head_dim: int | None = None, soc: str = "cpu"
) -> bool:
    """Whether kernel `op` (name without namespace) runs for this dtype/head size on `soc`."""
    from ascend_kernels import supports as kernel_supports

    return bool(kernel_supports(op, dtype=dtype, head_dim=head_dim, soc=soc))
