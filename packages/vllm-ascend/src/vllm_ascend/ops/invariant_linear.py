"""``vllm_ascend::batch_invariant_linear``: ascend-kernels' batch-invariant linear as one op."""
# As an op it stays one call in compiled graphs; traced, inductor would pick batch-dependent GEMMs.

from __future__ import annotations

import torch

OP_NAMESPACE = "vllm_ascend"
OP_NAME = "batch_invariant_linear"
OP_SCHEMA = "(Tensor x, Tensor weight, Tensor? bias) -> Tensor"


def register_invariant_linear_op() -> bool:
    """Define ``vllm_ascend::batch_invariant_linear`` once per process; True when defined now."""
    if hasattr(getattr(torch.ops, OP_NAMESPACE), OP_NAME):
        return False
    qualname = f"{OP_NAMESPACE}::{OP_NAME}"
    torch.library.define(qualname, OP_SCHEMA)
    torch.library.impl(qualname, "CompositeExplicitAutograd", _linear)
    torch.library.register_fake(qualname, _linear_fake)
    return True


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from ascend_kernels import batch_invariant

    return batch_invariant.linear(x, weight, bias)


def _linear_fake(x: torch.Tensor, weight: torch.Tensor,
                 bias: torch.Tensor | None) -> torch.Tensor:
    dtype = torch.promote_types(x.dtype, weight.dtype)
    return x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=dtype)
