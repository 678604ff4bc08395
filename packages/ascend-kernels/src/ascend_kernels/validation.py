"""Argument checks shared by the ops: one clear error per problem, cheap when nothing is wrong.

Every check is a few attribute reads and comparisons (no device sync, no data access), so the
same code runs in the reference, the NPU adapters and the fake implementations (where shapes
may be symbolic). Messages are formatted only when a check fails.

Errors: a bad argument raises ``ValueError`` naming it, what it got and what is allowed;
tensors on different devices raise :class:`DeviceMismatchError`, a ``RuntimeError`` like
torch's own device errors.
"""

from __future__ import annotations

import math

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)


class DeviceMismatchError(RuntimeError):
    """Tensor arguments of one op call live on different devices."""


def check(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` when ``condition`` is false."""
    if not condition:
        raise ValueError(message)


def check_devices(*named: tuple[str, torch.Tensor | None]) -> None:
    """Every given tensor is on the device of the first one (``None`` entries are skipped)."""
    first_name, first = named[0]
    assert first is not None
    device = first.device
    for name, t in named[1:]:
        if t is not None and t.device != device:
            raise DeviceMismatchError(
                f"{name} is on {t.device} but {first_name} is on {device}; all tensor"
                " arguments must be on the same device"
            )


def check_floating(name: str, t: torch.Tensor) -> None:
    """``t`` must be float32, bfloat16 or float16."""
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")


def check_index(name: str, t: torch.Tensor) -> None:
    """``t`` must hold int32 or int64 indices."""
    if t.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name} must be an int32 or int64 tensor, got {t.dtype}")


def check_rows(name: str, t: torch.Tensor) -> None:
    """``t`` must have at least one dim and a non-empty last dim (the reduced/quantized one)."""
    if t.dim() == 0 or t.shape[-1] == 0:
        raise ValueError(
            f"{name} must have at least 1 dim and a non-empty last dim, got shape {list(t.shape)}"
        )


def check_eps(eps: float) -> None:
    """``eps`` must be a finite number greater than 0."""
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")


def check_positive(name: str, value: int) -> None:
    """``value`` must be an integer > 0."""
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def check_vector(name: str, t: torch.Tensor, width: int) -> None:
    """``t`` must be a 1-D floating tensor of ``width`` values."""
    if t.dim() != 1 or t.shape[0] != width:
        raise ValueError(
            f"{name} must have shape [{width}] (the last dim of x), got {list(t.shape)}"
        )
    check_floating(name, t)


def check_same_shape(name: str, t: torch.Tensor, ref: torch.Tensor) -> None:
    """``t`` must have ``ref``'s shape and dtype."""
    if t.shape != ref.shape or t.dtype != ref.dtype:
        raise ValueError(
            f"{name} must match x (shape {list(ref.shape)}, {ref.dtype}),"
            f" got shape {list(t.shape)}, {t.dtype}"
        )


def check_out(
    name: str,
    t: torch.Tensor,
    like: torch.Tensor,
    shape: torch.Size | None = None,
    dtype: torch.dtype | None = None,
) -> None:
    """A preallocated output: contiguous, on ``like``'s device, with ``shape``/``dtype``
    (default: ``like``'s)."""
    shape = like.shape if shape is None else shape
    dtype = like.dtype if dtype is None else dtype
    if t.device != like.device:
        raise DeviceMismatchError(f"{name} is on {t.device} but x is on {like.device}")
    if t.shape != shape or t.dtype != dtype or not t.is_contiguous():
        raise ValueError(
            f"{name} must be a contiguous {dtype} tensor of shape {list(shape)},"
            f" got {t.dtype} {list(t.shape)} (contiguous={t.is_contiguous()})"
        )


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of two tensors intersect (never for empty or meta tensors,
    which store nothing).

    Conservative for interleaved strided views (their spans may intersect without a shared
    element); the ops' outputs are contiguous, so for them it is exact.
    """
    if a.numel() == 0 or b.numel() == 0 or a.device.type == "meta":
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def check_no_partial_overlap(
    out_name: str, out: torch.Tensor, *named: tuple[str, torch.Tensor]
) -> None:
    """An elementwise op's ``out`` may be one of its inputs itself (the same elements: start,
    shape and strides), never overlap one in part: each element would be written before
    the input element at its address is read. ``ValueError`` naming both otherwise."""
    for name, t in named:
        if overlaps(out, t) and not (
            out.data_ptr() == t.data_ptr() and out.shape == t.shape
            and out.stride() == t.stride() and out.dtype == t.dtype
        ):
            raise ValueError(f"{out_name} must not share memory with {name} (only being {name} "
                             "itself is allowed)")
