"""The exact text of every error the package raises: one case per message template.

Messages are part of the contract (they name the argument, what it got and what is allowed),
so each is checked in full here; test_error_contract.py checks the rules at their boundaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from ascend_kernels import (
    DeviceMismatchError,
    aligned_16,
    nd_to_nz_2d,
    nd_to_nz_spec,
    nz_cast_wanted,
    supports,
    trans_nd_to_nz,
)
from ascend_kernels.ops import spec

A = torch.ops.ascend
I64 = torch.int64


def _args(valid_args: Any, op: str, **changes: Any) -> tuple[Any, ...]:
    return tuple({**valid_args(op), **changes}.values())


CASES: list[tuple[str, Callable[[Any], Any], type[Exception], str]] = [
    ("device", lambda v: A.rms_norm(*_args(v, "rms_norm", weight=torch.ones(70, device="meta"))),
     DeviceMismatchError,
     "weight is on meta but x is on cpu; all tensor arguments must be on the same device"),
    ("floating", lambda v: A.dynamic_quant(torch.ones(2, 3, dtype=torch.int8)), ValueError,
     "x must be float32, bfloat16 or float16, got torch.int8"),
    ("index", lambda v: A.rotary_embedding(*_args(v, "rotary_embedding",
                                                  positions=torch.zeros(5))),
     ValueError, "positions must be an int32 or int64 tensor, got torch.float32"),
    ("rows", lambda v: A.dynamic_mx_quant(torch.ones(4, 0)), ValueError,
     "x must have at least 1 dim and a non-empty last dim, got shape [4, 0]"),
    ("eps", lambda v: A.rms_norm(*_args(v, "rms_norm", eps=-0.0)), ValueError,
     "eps must be finite and > 0, got -0.0"),
    ("positive", lambda v: A.split_qkv_rmsnorm_rope(*_args(v, "split_qkv_rmsnorm_rope",
                                                           kv_size=-3)),
     ValueError, "kv_size must be > 0, got -3"),
    ("vector", lambda v: A.rms_norm(*_args(v, "rms_norm", weight=torch.ones(2, 35))),
     ValueError, "weight must have shape [70] (the last dim of x), got [2, 35]"),
    ("same shape", lambda v: A.muls_add(torch.ones(2, 3), torch.ones(3, 2), 1.0), ValueError,
     "y must match x (shape [2, 3], torch.float32), got shape [3, 2], torch.float32"),
    ("out shape", lambda v: spec("rms_norm").out(torch.ones(2, 4), torch.ones(4), 1e-6,
                                                  out=torch.empty(4, 2).t()),
     ValueError, "out must be a contiguous torch.float32 tensor of shape [2, 4],"
     " got torch.float32 [2, 4] (contiguous=False)"),
    ("out device", lambda v: spec("muls_add").out(
        torch.ones(2), torch.ones(2), 1.0, out=torch.empty(2, device="meta")),
     DeviceMismatchError, "out is on meta but x is on cpu"),
    ("out aliasing", lambda v: (lambda x: spec("rms_norm").out(x, torch.ones(4), 1e-6,
                                                                out=x))(torch.ones(2, 4)),
     ValueError, "out must not share memory with x"),
    ("missing out", lambda v: spec("add_rms_norm_dynamic_mx_quant").out(
        torch.ones(2, 32), torch.ones(2, 32), torch.ones(32), 1e-6,
        out=torch.empty(2, 32).to(torch.float8_e4m3fn),
        scale_out=torch.empty(2, 1).to(torch.float8_e8m0fnu)),
     TypeError, "add_rms_norm_dynamic_mx_quant_out needs the keyword output(s) ['residual_out']"),
    ("no out helper", lambda v: spec("bgmv_expand").out(*_args(v, "bgmv_expand"),
                                                         out=torch.empty(0)),
     TypeError, "bgmv_expand has no _out helper (it returns a new tensor)"),
    ("too many arguments", lambda v: spec("rms_norm").checked_reference(
        torch.ones(2, 4), torch.ones(4), 1e-6, 1.0),
     TypeError, "ascend::rms_norm takes 3 arguments, got 4"),
    ("missing argument", lambda v: spec("rms_norm").checked_reference(torch.ones(2, 4)),
     TypeError, "ascend::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor: missing"
     " ['weight', 'eps'], unknown []"),
    ("scale numel", lambda v: A.quantize(torch.ones(2, 4), torch.ones(3), torch.ones(1)),
     ValueError, "scale must hold 1 value (per tensor) or 4 (per channel), got 3"),
    ("offset dtype", lambda v: A.quantize(torch.ones(2, 4), torch.ones(1),
                                          torch.ones(1, dtype=torch.bool)),
     ValueError, "offset must be a floating or integer tensor, got torch.bool"),
    ("rotary_dim", lambda v: A.rotary_embedding(*_args(v, "rotary_embedding", rotary_dim=31)),
     ValueError, "rotary_dim must be even and in (0, head_size=48], got 31"),
    ("cache", lambda v: A.rotary_embedding(*_args(v, "rotary_embedding",
                                                  cos_sin_cache=torch.ones(0, 32))),
     ValueError, "cos_sin_cache must be [max_position > 0, rotary_dim=32], got [0, 32]"),
    ("heads", lambda v: A.rotary_embedding(*_args(v, "rotary_embedding",
                                                  k=torch.ones(5, 47))),
     ValueError, "k must be [T=5, heads * 48] or [T, heads, 48], got [5, 47]"),
    ("positions range", lambda v: A.rotary_embedding(*_args(
        v, "rotary_embedding", positions=torch.tensor([0, 9, 1, -2, 3]))),
     ValueError, "positions must lie in [0, 8) (the rows of cos_sin_cache),"
     " got values in [-2, 9]"),
    ("multiples", lambda v: A.split_qkv_rmsnorm_rope(*_args(v, "split_qkv_rmsnorm_rope",
                                                            q_size=100)),
     ValueError, "q_size (100) and kv_size (96) must be multiples of head_size (48)"),
    ("qkv", lambda v: A.split_qkv_rmsnorm_rope(*_args(v, "split_qkv_rmsnorm_rope",
                                                      qkv=torch.ones(5, 10))),
     ValueError, "qkv must be [T, q_size + 2 * kv_size = 384], got [5, 10]"),
    ("positions count", lambda v: A.split_qkv_rmsnorm_rope(*_args(
        v, "split_qkv_rmsnorm_rope", positions=torch.tensor([0, 1]))),
     ValueError, "positions must hold T=5 values, got 2"),
    ("lora 2-D", lambda v: A.bgmv_expand(*_args(v, "bgmv_expand", y=torch.ones(40))),
     ValueError, "y must be 2-D [T, ...], got [40]"),
    ("lora tokens", lambda v: A.bgmv_expand(*_args(v, "bgmv_expand", y=torch.ones(4, 40))),
     ValueError, "x and y need the same token count, got 5, 4"),
    ("lora slice", lambda v: A.bgmv_expand(*_args(v, "bgmv_expand", slice_offset=30)),
     ValueError, "slice_offset (30) and slice_size (16) must be >= 0 and the slice must lie"
     " within y's 40 columns"),
    ("lora weight", lambda v: A.bgmv_expand(*_args(v, "bgmv_expand",
                                                   weight=torch.ones(3, 2, 16, 8))),
     ValueError, "weight must be [num_loras, slice_size=16, rank=8] (or [num_loras, 1, 16, 8]),"
     " got [3, 2, 16, 8]"),
    ("lora indices shape", lambda v: A.bgmv_expand(*_args(v, "bgmv_expand",
                                                          indices=torch.zeros(2, dtype=I64))),
     ValueError, "indices must be [T=5], got [2]"),
    ("lora index range", lambda v: A.bgmv_expand(*_args(
        v, "bgmv_expand", indices=torch.tensor([0, 3, -1, 2, 0]))),
     ValueError, "indices must be < num_loras=3 (negative: no LoRA), got 3"),
    ("sgmv index range", lambda v: A.sgmv_expand(*_args(
        v, "sgmv_expand", lora_indices=torch.tensor([4, 0]))),
     ValueError, "lora_indices must be < num_loras=3 (negative: no LoRA), got 4"),
    ("sgmv lengths", lambda v: A.sgmv_expand(*_args(v, "sgmv_expand",
                                                    seq_len=torch.tensor([5]))),
     ValueError, "lora_indices and seq_len must be 1-D of equal length, got [2], [1]"),
    ("sgmv negative", lambda v: A.sgmv_expand(*_args(v, "sgmv_expand",
                                                     seq_len=torch.tensor([-1, 6]))),
     ValueError, "seq_len must be >= 0, got [-1, 6]"),
    ("sgmv sum", lambda v: A.sgmv_expand(*_args(v, "sgmv_expand", seq_len=torch.tensor([1, 1]))),
     ValueError, "seq_len must sum to the token count 5, got 2"),
    ("nz 2d", lambda v: nd_to_nz_2d(torch.ones(2, 2, 2)), ValueError,
     "nd_to_nz_2d needs a 2-D tensor, got shape [2, 2, 2]"),
    ("nz spec", lambda v: nd_to_nz_spec(torch.ones(3)), ValueError,
     "nd_to_nz_spec needs a 2-D mask, got shape [3]"),
    ("nz dims", lambda v: trans_nd_to_nz(torch.ones(16)), ValueError,
     "trans_nd_to_nz needs at least 2 dims, got shape [16]"),
    ("nz blocks", lambda v: trans_nd_to_nz(torch.ones(16, 16, dtype=torch.int8)), ValueError,
     "trans_nd_to_nz needs the last two dims to be multiples of (16, 32) for torch.int8,"
     " got (16, 16)"),
    ("aligned", lambda v: aligned_16(torch.tensor(1.0)), ValueError,
     "aligned_16 needs at least one dim"),
    ("nz mode", lambda v: nz_cast_wanted(torch.int8, weight_nz_mode=3, soc="A2"), ValueError,
     "weight_nz_mode must be 0, 1 or 2, got 3"),
    ("nz soc", lambda v: nz_cast_wanted(torch.int8, weight_nz_mode=1, soc="910"), ValueError,
     "unknown soc '910'; allowed: A2, A3, A5, 310P, cpu"),
    ("supports dtype", lambda v: supports("rms_norm", dtype="bfloat17"), ValueError,
     "dtype 'bfloat17' is not a torch dtype name (e.g. 'bfloat16')"),
    ("supports head", lambda v: supports("rms_norm", head_dim=-1), ValueError,
     "head_dim must be positive, got -1"),
]


@pytest.mark.parametrize(("case", "call", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_exact_message(
    case: str, call: Callable[[Any], Any], error: type[Exception], message: str,
    valid_args: Any,
) -> None:
    with pytest.raises(error) as info:
        call(valid_args)
    assert type(info.value) is error
    assert str(info.value) == message
