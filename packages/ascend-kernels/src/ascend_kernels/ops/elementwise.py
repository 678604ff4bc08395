"""``muls_add``: ``x * scale + y`` computed in float32 with one cast to the input dtype.

That is the operator namespace's rule (every ``ascend::`` op computes in float32 and casts to
the input dtype once, at the end), and what the NPU kernel computes. In float32 it equals eager
``x * s + y`` bit for bit; in bfloat16 and float16 it differs from eager (which rounds the
product to the input dtype before the add) by at most one rounding step, and is the more
accurate of the two.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_kernels.ops.spec import Arguments, OpSpec, like
from ascend_kernels.validation import check_devices, check_floating, check_same_shape

F32 = torch.float32


def check_muls_add(a: Arguments) -> None:
    """``muls_add``: float ``x``, ``y`` like ``x``, same device."""
    check_devices(("x", a["x"]), ("y", a["y"]))
    check_floating("x", a["x"])
    check_same_shape("y", a["y"], a["x"])


def muls_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """``ascend::muls_add``: ``x * scale + y`` in float32, one cast."""
    return (x.to(F32) * scale + y.to(F32)).to(x.dtype)


def npu_muls_add(npu: ModuleType, a: Arguments) -> torch.Tensor:
    """NPU: one aclnnAdd with alpha, ``y + scale * x``."""
    return torch.add(a["y"], a["x"], alpha=a["scale"])


SPECS = (
    OpSpec(
        "muls_add",
        "(Tensor x, Tensor y, float scale) -> Tensor",
        check_muls_add, muls_add, fake=lambda a: like(a["x"]), npu=npu_muls_add,
        decompose=True, out_may_be_input=True,
    ),
)
