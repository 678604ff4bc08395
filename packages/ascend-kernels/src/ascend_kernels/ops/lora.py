"""LoRA expand references (punica ``bgmv_expand`` / ``sgmv_expand``), functional.

``y_new = y.clone(); y_new[:, off:off + size] += x @ weight[idx].T`` per token, in float32 with
one cast to ``y``'s dtype. ``weight`` is ``[num_loras, slice_size, rank]`` (or with a singleton
second dim, ``[num_loras, 1, slice_size, rank]``); a negative LoRA index means "no LoRA" and
leaves the row unchanged. ``y`` itself is never modified.

The references read the index values (which LoRA each token uses), so their fakes are
written out; they have no NPU adapter here (the kernels come from vllm-ascend's compiled
extension).
"""

from __future__ import annotations

import torch

from ascend_kernels.ops.spec import Arguments, OpSpec
from ascend_kernels.validation import check_devices, check_floating, check_index


def _weights3(weight: torch.Tensor) -> torch.Tensor:
    if weight.dim() == 4 and weight.shape[1] == 1:
        return weight.squeeze(1)
    return weight


def _check_expand(
    x: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, slice_offset: int, slice_size: int
) -> None:
    """The arguments both expand ops share (devices are checked by the callers)."""
    for name, t in (("x", x), ("y", y)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D [T, ...], got {list(t.shape)}")
        check_floating(name, t)
    check_floating("weight", weight)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y need the same token count, got {x.shape[0]}, {y.shape[0]}")
    if slice_offset < 0 or slice_size < 0 or slice_offset + slice_size > y.shape[1]:
        raise ValueError(
            f"slice_offset ({slice_offset}) and slice_size ({slice_size}) must be >= 0 and"
            f" the slice must lie within y's {y.shape[1]} columns"
        )
    w3 = _weights3(weight)
    if w3.dim() != 3 or w3.shape[1] != slice_size or w3.shape[2] != x.shape[1]:
        raise ValueError(
            f"weight must be [num_loras, slice_size={slice_size}, rank={x.shape[1]}]"
            f" (or [num_loras, 1, {slice_size}, {x.shape[1]}]), got {list(weight.shape)}"
        )


def check_bgmv_expand(a: Arguments) -> None:
    """``bgmv_expand`` (index values: checked by the reference)."""
    x, indices = a["x"], a["indices"]
    check_devices(("x", x), ("weight", a["weight"]), ("indices", indices), ("y", a["y"]))
    _check_expand(x, a["weight"], a["y"], a["slice_offset"], a["slice_size"])
    check_index("indices", indices)
    if indices.dim() != 1 or indices.shape[0] != x.shape[0]:
        raise ValueError(f"indices must be [T={x.shape[0]}], got {list(indices.shape)}")


def check_sgmv_expand(a: Arguments) -> None:
    """``sgmv_expand`` (values of seq_len and lora_indices: checked by the reference, which
    needs them anyway)."""
    lora_indices, seq_len = a["lora_indices"], a["seq_len"]
    check_devices(*((name, a[name]) for name in ("x", "weight", "lora_indices", "seq_len", "y")))
    _check_expand(a["x"], a["weight"], a["y"], a["slice_offset"], a["slice_size"])
    check_index("lora_indices", lora_indices)
    check_index("seq_len", seq_len)
    if lora_indices.dim() != 1 or lora_indices.shape != seq_len.shape:
        raise ValueError(
            f"lora_indices and seq_len must be 1-D of equal length,"
            f" got {list(lora_indices.shape)}, {list(seq_len.shape)}"
        )


def _expand(
    x: torch.Tensor,
    w3: torch.Tensor,
    token_lora: torch.Tensor,
    y: torch.Tensor,
    slice_offset: int,
    slice_size: int,
    index_name: str = "indices",
) -> torch.Tensor:
    out = y.clone(memory_format=torch.contiguous_format)
    target = out[:, slice_offset : slice_offset + slice_size]
    acc = target.to(torch.float32)
    x32 = x.to(torch.float32)
    for lora in torch.unique(token_lora).tolist():
        if lora < 0:
            continue
        if lora >= w3.shape[0]:
            raise ValueError(
                f"{index_name} must be < num_loras={w3.shape[0]} (negative: no LoRA), got {lora}"
            )
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
    return _expand(x, _weights3(weight), indices, y, slice_offset, slice_size)


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
    if bool((seq_len < 0).any()):
        raise ValueError(f"seq_len must be >= 0, got {seq_len.tolist()}")
    total = int(seq_len.sum())
    if total != x.shape[0]:
        raise ValueError(f"seq_len must sum to the token count {x.shape[0]}, got {total}")
    token_lora = torch.repeat_interleave(lora_indices, seq_len)
    return _expand(
        x, _weights3(weight), token_lora, y, slice_offset, slice_size, "lora_indices"
    )


def expand_fake(a: Arguments) -> torch.Tensor:
    """Fake of both expand ops: a new contiguous tensor shaped like ``y``."""
    y: torch.Tensor = a["y"]
    return y.new_empty(y.shape)


SPECS = (
    OpSpec(
        "bgmv_expand",
        "(Tensor x, Tensor weight, Tensor indices, Tensor y, int slice_offset,"
        " int slice_size) -> Tensor",
        check_bgmv_expand, bgmv_expand, fake=expand_fake, out_names=(),
    ),
    OpSpec(
        "sgmv_expand",
        "(Tensor x, Tensor weight, Tensor lora_indices, Tensor seq_len, Tensor y,"
        " int slice_offset, int slice_size) -> Tensor",
        check_sgmv_expand, sgmv_expand, fake=expand_fake, out_names=(),
    ),
)
