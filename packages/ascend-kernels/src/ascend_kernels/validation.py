"""Argument checks shared by the reference kernels: one clear ``ValueError`` per problem."""

from __future__ import annotations

import torch


def check(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` when ``condition`` is false."""
    if not condition:
        raise ValueError(message)


def check_floating(name: str, t: torch.Tensor) -> None:
    """``t`` must be float32, bfloat16 or float16."""
    check(
        t.dtype in (torch.float32, torch.bfloat16, torch.float16),
        f"{name} must be float32, bfloat16 or float16, got {t.dtype}",
    )


def check_vector(name: str, t: torch.Tensor, width: int) -> None:
    """``t`` must be a 1-D tensor of ``width`` values."""
    check(
        t.dim() == 1 and t.shape[0] == width,
        f"{name} must have shape [{width}] (the last dim of x), got {list(t.shape)}",
    )


def check_same_shape(name: str, t: torch.Tensor, ref: torch.Tensor) -> None:
    """``t`` must have ``ref``'s shape and dtype."""
    check(
        t.shape == ref.shape and t.dtype == ref.dtype,
        f"{name} must match x (shape {list(ref.shape)}, {ref.dtype}),"
        f" got shape {list(t.shape)}, {t.dtype}",
    )


def check_out(name: str, t: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> None:
    """A preallocated output must be contiguous with the given shape and dtype."""
    check(
        t.shape == shape and t.dtype == dtype and t.is_contiguous(),
        f"{name} must be a contiguous {dtype} tensor of shape {list(shape)},"
        f" got {t.dtype} {list(t.shape)} (contiguous={t.is_contiguous()})",
    )
