"""Seeded random tensors and hypothesis strategies shared by the ascend-kernels op tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st


def seeded_randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """Standard-normal float32 values of ``shape``, the same for the same ``seed``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def rand_scaled(
    shape: tuple[int, int], seed: int, dtype: torch.dtype, scale: float
) -> torch.Tensor:
    """Seeded standard-normal values times ``scale``, cast to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


RANDOM_DTYPES = st.sampled_from([torch.float32, torch.bfloat16])


RANDOM_SHAPES = st.tuples(st.integers(0, 9), st.integers(1, 100))
