"""The three fusion passes: each registers its keyed patterns from its own settings."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ascend_graph.capability import check_soc, supports
from ascend_graph.passes.base import FusionPattern, PatternPass
from ascend_graph.passes.muls_add import MulsAddPattern
from ascend_graph.passes.norm_quant import (
    AddRmsNormDynamicMxQuantPattern,
    AddRmsNormDynamicQuantPattern,
    AddRmsNormQuantPattern,
    RmsNormDynamicMxQuantPattern,
)
from ascend_graph.passes.qknorm_rope import FUSED_OP, QKNormRopePattern

DEFAULT_EPS: tuple[float, ...] = (1e-6, 1e-5)
DEFAULT_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)


def as_dtype(value: Any) -> torch.dtype:
    """A torch dtype from a dtype or its name ("bfloat16", "torch.float32")."""
    if isinstance(value, torch.dtype):
        return value
    name = str(value).removeprefix("torch.")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype {value!r} is not a floating torch dtype (e.g. 'bfloat16')")
    return dtype


def _eps_list(eps_values: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(e) for e in eps_values)
    if not values or any(not 0.0 < e < 1.0 for e in values):
        raise ValueError(f"norm eps values must be in (0, 1), got {list(eps_values)!r}")
    return values


class _PerEpsDtypePass(PatternPass):
    """A pass whose patterns are registered for every norm eps and dtype it is given."""

    def __init__(
        self,
        *,
        eps_values: Sequence[float] = DEFAULT_EPS,
        dtypes: Sequence[Any] = DEFAULT_DTYPES,
        soc: str = "cpu",
    ) -> None:
        super().__init__()
        self.soc = check_soc(soc)
        for eps in _eps_list(eps_values):
            for dtype in map(as_dtype, dtypes):
                for pattern in self.patterns_for(eps, dtype):
                    self.register(pattern)

    @abstractmethod
    def patterns_for(self, eps: float, dtype: torch.dtype) -> Iterator[FusionPattern[Any]]:
        """The patterns for one eps and dtype that the kernels support on `self.soc`."""


class NormQuantPass(_PerEpsDtypePass):
    """add_rms_norm/rms_norm + quantisation; one pattern per variant, eps and dtype the
    kernel supports on `soc` (MX variants therefore only where MX kernels exist)."""

    name = "norm_quant"

    def patterns_for(self, eps: float, dtype: torch.dtype) -> Iterator[FusionPattern[Any]]:
        soc = self.soc
        if supports("add_rms_norm_quant", dtype=dtype, soc=soc):
            for bias in (False, True):
                yield AddRmsNormQuantPattern(eps=eps, dtype=dtype, bias=bias)
        if supports("add_rms_norm_dynamic_quant", dtype=dtype, soc=soc):
            for bias in (False, True):
                yield AddRmsNormDynamicQuantPattern(eps=eps, dtype=dtype, bias=bias)
        if supports("add_rms_norm_dynamic_mx_quant", dtype=dtype, soc=soc):
            yield AddRmsNormDynamicMxQuantPattern(eps=eps, dtype=dtype)
        if supports("rms_norm_dynamic_mx_quant", dtype=dtype, soc=soc):
            yield RmsNormDynamicMxQuantPattern(eps=eps, dtype=dtype)


class QKNormRopePass(_PerEpsDtypePass):
    """q/k RMSNorm + RoPE on a packed qkv. `shapes` lists (head_dim, q_size, kv_size) per
    attention geometry the model has (None: any geometry the kernel supports)."""

    name = "qknorm_rope"

    def __init__(
        self,
        *,
        shapes: Sequence[tuple[int, int, int]] | None = None,
        eps_values: Sequence[float] = DEFAULT_EPS,
        dtypes: Sequence[Any] = DEFAULT_DTYPES,
        soc: str = "cpu",
    ) -> None:
        self.geometries: list[tuple[int | None, int | None, int | None]] = (
            [(None, None, None)] if shapes is None else [_check_shape(s) for s in shapes]
        )
        super().__init__(eps_values=eps_values, dtypes=dtypes, soc=soc)

    def patterns_for(self, eps: float, dtype: torch.dtype) -> Iterator[FusionPattern[Any]]:
        for head_dim, q_size, kv_size in self.geometries:
            if not supports(FUSED_OP, dtype=dtype, head_dim=head_dim, soc=self.soc):
                continue
            for bias in (False, True):
                yield QKNormRopePattern(
                    eps=eps, dtype=dtype, bias=bias, head_dim=head_dim,
                    q_size=q_size, kv_size=kv_size, soc=self.soc,
                )  # fmt: skip


def _check_shape(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    try:
        head_dim, q_size, kv_size = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise ValueError(
            f"qknorm shape {shape!r} must be (head_dim, q_size, kv_size) integers"
        ) from None
    if head_dim <= 0 or q_size % head_dim or kv_size % head_dim or min(q_size, kv_size) <= 0:
        raise ValueError(
            f"qknorm shape {shape!r}: q_size and kv_size must be positive multiples of head_dim"
        )
    return head_dim, q_size, kv_size


class MulsAddPass(PatternPass):
    """`x * scale + y` -> muls_add, for the model's scale (None: any constant scale)."""

    name = "muls_add"

    def __init__(
        self,
        *,
        scale: float | None = None,
        dtypes: Sequence[Any] = DEFAULT_DTYPES,
        soc: str = "cpu",
    ) -> None:
        super().__init__()
        self.soc = check_soc(soc)
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
            raise ValueError(f"muls_add_scale must be a number or None, got {scale!r}")
        for dtype in map(as_dtype, dtypes):
            if supports("muls_add", dtype=dtype, soc=soc):
                self.register(
                    MulsAddPattern(scale=None if scale is None else float(scale), dtype=dtype)
                )
