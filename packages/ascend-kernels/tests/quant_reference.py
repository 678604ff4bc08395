"""Quantization references for the norm/quant/mx kernel tests: per-row int8 written out in
NumPy, and the check that a fused add+norm+quant op equals its parts run one after another."""

from __future__ import annotations

import numpy as np
import torch

from .random_inputs import rand_scaled

A = torch.ops.ascend


def int8_rows(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8 quantization written out in NumPy float32."""
    a = x.detach().to(torch.float32).numpy()
    scale = (np.abs(a).max(axis=-1) / np.float32(127)).astype(np.float32)
    div = np.where(scale == 0, np.float32(1), scale)[..., None]
    q = np.clip(np.round(a / div), -128, 127).astype(np.int8)
    return q, scale


def assert_fused_equals_composition(
    op: str, shape: tuple[int, int], seed: int, dtype: torch.dtype
) -> None:
    """``torch.ops.ascend.<op>`` is bit-equal to ``add_rms_norm`` followed by its quant op."""
    x, r = rand_scaled(shape, seed, dtype, 4.0), rand_scaled(shape, seed + 1, dtype, 1.0)
    w = rand_scaled((1, shape[1]), seed + 2, dtype, 1.0)[0]
    fused = getattr(A, op)(x, r, w, 1e-6)
    y, summed = A.add_rms_norm(x, r, w, 1e-6)
    quant = A.dynamic_quant if op == "add_rms_norm_dynamic_quant" else A.dynamic_mx_quant
    for got, want in zip(fused, (*quant(y), summed), strict=True):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
