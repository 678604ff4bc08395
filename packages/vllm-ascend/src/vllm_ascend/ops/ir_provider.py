"""The ``ascend`` provider for vLLM's IR ops ``rms_norm`` and ``fused_add_rms_norm``."""
# No `from __future__ import annotations`: the signatures must equal the IR ops' schemas exactly.

import torch
from torch import Tensor

PROVIDER = "ascend"
IR_OPS = ("rms_norm", "fused_add_rms_norm")


def _rms_norm_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    return weight is not None and variance_size is None


def ascend_rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """vllm_ir.rms_norm through ``torch.ops.ascend.rms_norm`` (weight required)."""
    assert weight is not None and variance_size is None
    out: Tensor = torch.ops.ascend.rms_norm(x, weight, epsilon)
    return out


def _fused_add_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return weight is not None and variance_size is None


def ascend_fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """vllm_ir.fused_add_rms_norm through ``torch.ops.ascend.add_rms_norm``."""
    assert weight is not None and variance_size is None
    out, residual = torch.ops.ascend.add_rms_norm(x, x_residual, weight, epsilon)
    return out, residual


def register_ascend_ir_provider(soc: str = "cpu") -> bool:
    """Register the ``ascend`` implementations once per process; True when newly registered."""
    import ascend_kernels  # noqa: F401 - registers torch.ops.ascend.*
    from vllm import ir

    done = False
    for name, impl, supports in (
        ("rms_norm", ascend_rms_norm, _rms_norm_supported),
        ("fused_add_rms_norm", ascend_fused_add_rms_norm, _fused_add_supported),
    ):
        op = getattr(ir.ops, name)
        if PROVIDER in op.impls:
            continue
        op.register_impl(PROVIDER, supports_args=supports)(impl)
        done = True
    return done


def reset_ascend_ir_provider() -> None:
    """Remove the ``ascend`` implementations (tests)."""
    from vllm import ir

    for name in IR_OPS:
        getattr(ir.ops, name).impls.pop(PROVIDER, None)


def ascend_ir_priority(vllm_config: object = None) -> object:
    """IR priority with ``ascend`` first for the norms and ``native`` for everything else."""
    from vllm.config.kernel import IrOpPriorityConfig

    return IrOpPriorityConfig.with_default(
        ["native"], rms_norm=[PROVIDER, "native"], fused_add_rms_norm=[PROVIDER, "native"]
    )
