"""opcheck-style: every NPU adapter's outputs have the dtypes and shapes of the op's fake.

The adapters run on the fake torch_npu of ``torch_npu_double.seam`` (outputs built from the real
wheel's meta functions), with inputs every kernel takes (bfloat16, whole-head rotary of 32,
int32 offsets), so each adapter really calls its kernel. The expected dtypes and shapes come
from the ``ascend::`` op's own fake implementation, the contract torch.compile traces with.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ascend_kernels.ops import SPECS
from ascend_kernels.registration import fake_impl
from torch_npu_double.seam import FakeTorchNpu

A = torch.ops.ascend
HEAD = 32


def kernel_arguments(op: str, valid_args: Any) -> dict[str, Any]:
    """Valid bfloat16 arguments of ``ascend::<op>`` that the torch_npu kernel accepts."""
    args: dict[str, Any] = valid_args(op, torch.bfloat16)
    g = torch.Generator().manual_seed(1)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(torch.bfloat16)

    if "offset" in args:
        args["offset"] = torch.tensor([1], dtype=torch.int32)
    if op in ("rotary_embedding", "mrotary_embedding"):
        args.update(q=rand(5, 4 * HEAD), k=rand(5, 2, HEAD), cos_sin_cache=rand(8, HEAD),
                    head_size=HEAD, rotary_dim=HEAD)
    if op == "split_qkv_rmsnorm_rope":
        args.update(qkv=rand(5, 8 * HEAD), q_weight=rand(HEAD), k_weight=rand(HEAD),
                    q_bias=rand(HEAD), k_bias=rand(HEAD), cos_sin_cache=rand(8, HEAD),
                    q_size=4 * HEAD, kv_size=2 * HEAD, head_size=HEAD, rotary_dim=HEAD)
    if op in ("paged_attention", "reshape_and_cache"):  # FIA: blocks and heads of 16
        cache = (3, 16, 2, 16)
        args.update(key_cache=rand(*cache), value_cache=rand(*cache))
    if op == "paged_attention":
        args.update(block_table=torch.tensor([[2, 0], [1, 0]], dtype=torch.int32),
                    seq_lens=[3, 12])
    return args


def _flat(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple | list) else [] if out is None else [out]


@pytest.mark.parametrize("op", sorted(op for op, s in SPECS.items() if s.npu is not None))
def test_adapter_outputs_match_the_ops_fake(
    op: str, fake_npu_on_cpu: FakeTorchNpu, valid_args: Any
) -> None:
    args = kernel_arguments(op, valid_args)
    got = _flat(getattr(A, op)(**args))
    want = _flat(fake_impl(op)(**args))
    assert [(t.dtype, tuple(t.shape)) for t in got] == [(t.dtype, tuple(t.shape)) for t in want]
    # The kernel really ran (muls_add is one aten add, no torch_npu kernel).
    assert bool(fake_npu_on_cpu.calls) is (op != "muls_add")
