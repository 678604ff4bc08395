"""LoRA expand references (punica ``bgmv_expand`` / ``sgmv_expand``), functional.

``y_new = y.clone(); y_new[:, off:off + size] += x @ weight[idx].T`` per token, in float32 with
one cast to ``y``'s dtype. ``weight`` is ``[num_loras, slice_size, rank]`` (or with a singleton
second dim, ``[num_loras, 1, slice_size, rank]``); a negative LoRA index means "no LoRA" and
leaves the row unchanged. ``y`` itself is never modified.
"""

from __future__ import annotations

import torch

from ascend_kernels.validation import check


def _weights3(weight: torch.Tensor) -> torch.Tensor:
    if weight.dim() == 4 and weight.shape[1] == 1:
        return weight.squeeze(1)
    check(weight.dim() == 3, f"weight must be [num_loras, out, rank], got {list(weight.shape)}")
    return weight


def _check(
    x: torch.Tensor, w3: torch.Tensor, y: torch.Tensor, slice_offset: int, slice_size: int
) -> None:
    check(
        x.dim() == 2 and y.dim() == 2, f"x and y must be 2-D, got {list(x.shape)}, {list(y.shape)}"
    )
    check(
        x.shape[0] == y.shape[0],
        f"x and y need the same token count, got {x.shape[0]}, {y.shape[0]}",
    )
    check(
        w3.shape[1] == slice_size and w3.shape[2] == x.shape[1],
        f"weight must be [num_loras, slice_size={slice_size}, rank={x.shape[1]}],"
        f" got {list(w3.shape)}",
    )
    check(
        slice_offset >= 0 and slice_offset + slice_size <= y.shape[1],
        f"slice [{slice_offset}, {slice_offset + slice_size}) must lie within y's"
        f" {y.shape[1]} columns",
    )


def _expand(
    x: torch.Tensor,
    w3: torch.Tensor,
    token_lora: torch.Tensor,
    y: torch.Tensor,
    slice_offset: int,
    slice_size: int,
) -> torch.Tensor:
    out = y.clone(memory_format=torch.contiguous_format)
    target = out[:, slice_offset : slice_offset + slice_size]
    acc = target.to(torch.float32)
    x32 = x.to(torch.float32)
    for lora in torch.unique(token_lora).tolist():
        if lora < 0:
            continue
        check(lora < w3.shape[0], f"LoRA index {lora} out of range for {w3.shape[0]} LoRAs")
        rows = (token_lora == lora).nonzero().squeeze(1)
        acc[rows] += x32[rows] @ w3[lora].to(torch.float32).T
    target.copy_(acc)
    return out


def bgmv_expand(
    x: torch.Tensor,
    weight: torch.Tensor,
    indices: torch.Tensor,
    y: torch.Tensor,
    slice_offset: int,
    slice_size: int,
) -> torch.Tensor:
    """Reference ``ascend::bgmv_expand``: one LoRA index per token."""
    w3 = _weights3(weight)
    _check(x, w3, y, slice_offset, slice_size)
    check(
        indices.dim() == 1 and indices.shape[0] == x.shape[0],
        f"indices must be [T={x.shape[0]}], got {list(indices.shape)}",
    )
    return _expand(x, w3, indices, y, slice_offset, slice_size)


def sgmv_expand(
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_indices: torch.Tensor,
    seq_len: torch.Tensor,
    y: torch.Tensor,
    slice_offset: int,
    slice_size: int,
) -> torch.Tensor:
    """Reference ``ascend::sgmv_expand``: ``bgmv_expand`` with ``lora_indices[i]`` repeated
    ``seq_len[i]`` times (one LoRA index per sequence)."""
    check(
        lora_indices.shape == seq_len.shape and lora_indices.dim() == 1,
        f"lora_indices and seq_len must be 1-D of equal length,"
        f" got {list(lora_indices.shape)}, {list(seq_len.shape)}",
    )
    tokens = x.shape[0] if x.dim() else 0
    total = int(seq_len.sum())
    check(total == tokens, f"seq_len must sum to the token count {tokens}, got {total}")
    token_lora = torch.repeat_interleave(lora_indices, seq_len)
    return bgmv_expand(x, weight, token_lora, y, slice_offset, slice_size)


def bgmv_expand_fake(
    x: torch.Tensor,
    weight: torch.Tensor,
    indices: torch.Tensor,
    y: torch.Tensor,
    slice_offset: int,
    slice_size: int,
) -> torch.Tensor:
    """Fake ``ascend::bgmv_expand``: a new tensor shaped like ``y``."""
    return torch.empty(y.shape, dtype=y.dtype, device=y.device)


def sgmv_expand_fake(
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_indices: torch.Tensor,
    seq_len: torch.Tensor,
    y: torch.Tensor,
    slice_offset: int,
    slice_size: int,
) -> torch.Tensor:
    """Fake ``ascend::sgmv_expand``: a new tensor shaped like ``y``."""
    return torch.empty(y.shape, dtype=y.dtype, device=y.device)
