"""Reference int8 x int8 linear with dequantization (plain torch, int32 accumulation)."""
# Affine operands: sum_k (q_x - o_x)(q_w - o_w) = acc - o_w * sum_k q_x - o_x * sum_k q_w + K * o_x
# * o_w; zero offsets give the NPU quant-matmul's s_x * s_w * (q_x @ q_w.T).

from __future__ import annotations

import torch


def int8_linear(
    q_x: torch.Tensor,
    x_scale: torch.Tensor,
    q_w: torch.Tensor,
    w_scale: torch.Tensor,
    *,
    x_offset: torch.Tensor | None = None,
    w_offset: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``dequant(q_x) @ dequant(q_w).T + bias`` for int8 ``q_x [..., K]`` (scale/offset per tensor
    or row) and ``q_w [N, K]`` (per channel), accumulated in int32."""
    if q_x.dtype != torch.int8 or q_w.dtype != torch.int8:
        raise TypeError(f"int8_linear needs int8 operands, got {q_x.dtype} and {q_w.dtype}")
    k = q_x.shape[-1]
    if q_w.dim() != 2 or q_w.shape[1] != k:
        raise ValueError(f"weight shape {tuple(q_w.shape)} does not match input width {k}")
    lead = q_x.shape[:-1]
    x2 = q_x.reshape(-1, k).to(torch.int32)
    acc = torch.mm(x2, q_w.to(torch.int32).t()).to(torch.float32)  # exact int32 accumulation
    # Per-tensor values broadcast as [1, 1]; per-token ones become a column [M, 1].
    sx = x_scale.to(torch.float32).reshape(-1, 1)
    sw = w_scale.to(torch.float32).reshape(1, -1)
    if w_offset is not None:
        ow = w_offset.to(torch.float32).reshape(1, -1)
        acc = acc - ow * x2.sum(dim=-1, keepdim=True).to(torch.float32)
    if x_offset is not None:
        ox = x_offset.to(torch.float32).reshape(-1, 1)
        w_sum = q_w.to(torch.int32).sum(dim=-1).to(torch.float32).reshape(1, -1)
        acc = acc - ox * w_sum
        if w_offset is not None:
            acc = acc + ox * ow * k
    y = acc * sx * sw
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype).reshape(*lead, q_w.shape[0])


_LOW_32_BITS = 0xFFFFFFFF


def deq_scale_float32(deq_scale: torch.Tensor) -> torch.Tensor:
    """A ModelSlim ``deq_scale`` (float, or int64 holding float32 bits) as float32; ValueError when
    an int64 entry has bits above the low 32."""
    if deq_scale.dtype != torch.int64:
        if not deq_scale.is_floating_point():
            raise ValueError(f"deq_scale must be float32/bfloat16/float16 or int64 (float32 "
                             f"bits), got {deq_scale.dtype}")
        return deq_scale.to(torch.float32)
    if bool((deq_scale >> 32).any()):
        raise ValueError("deq_scale int64 entries must hold a float32 bit pattern in their low "
                         "32 bits (the upper 32 bits zero)")
    low = deq_scale & _LOW_32_BITS
    signed = torch.where(low >= 2**31, low - 2**32, low).to(torch.int32)
    return signed.view(torch.float32)


def int8_linear_dequant(
    q_x: torch.Tensor,
    q_w: torch.Tensor,
    deq_scale: torch.Tensor,
    *,
    quant_bias: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``(q_x @ q_w.T + quant_bias) * deq_scale (+ bias)`` with int32 accumulation and one cast;
    ``deq_scale`` has 1 or ``N`` values, ``quant_bias`` is int32 ``[N]``."""
    if q_x.dtype != torch.int8 or q_w.dtype != torch.int8:
        raise TypeError(f"int8_linear_dequant needs int8 operands, got {q_x.dtype} and "
                        f"{q_w.dtype}")
    k = q_x.shape[-1]
    if q_w.dim() != 2 or q_w.shape[1] != k:
        raise ValueError(f"weight shape {tuple(q_w.shape)} does not match input width {k}")
    lead = q_x.shape[:-1]
    acc = torch.mm(q_x.reshape(-1, k).to(torch.int32), q_w.to(torch.int32).t())
    if quant_bias is not None:
        acc = acc + quant_bias.to(torch.int32).reshape(1, -1)
    y = acc.to(torch.float32) * deq_scale_float32(deq_scale).reshape(1, -1)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype).reshape(*lead, q_w.shape[0])
