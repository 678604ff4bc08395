"""Row-chunked iteration shared by the reference kernels.

The reference ops process a few rows at a time in float32 scratch buffers that stay in cache,
so a fused op reads its inputs and writes its outputs exactly once, and the fused op and its
unfused composition run the very same per-chunk arithmetic (hence bit-identical results).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

# Elements of one float32 scratch buffer (2 MiB): large enough that the per-chunk Python
# overhead stays small next to memory time, small enough to stay in the L2/L3 cache.
CHUNK_ELEMENTS = 1 << 19


def as_rows3(t: torch.Tensor) -> torch.Tensor:
    """View ``t`` (shape ``[..., H]``) as ``[N, M, H]`` without copying when possible.

    Contiguous-in-rows tensors become ``[R, 1, H]``; a strided view such as a head split of a
    fused qkv buffer (``[T, heads, H]`` with a row stride) keeps its first dimension.
    """
    width = t.shape[-1]
    if t.dim() == 1:
        return t.view(1, 1, width)
    try:
        return t.view(-1, 1, width)
    except RuntimeError:
        return t.reshape(t.shape[0], -1, width)


def chunks(n: int, per_item: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` ranges over ``n`` items of ``per_item`` elements each."""
    step = max(1, CHUNK_ELEMENTS // max(per_item, 1))
    for start in range(0, n, step):
        yield start, min(start + step, n)


def chunk_rows(n: int, per_item: int) -> int:
    """Largest chunk length that ``chunks`` yields for these sizes."""
    return max(1, min(n, CHUNK_ELEMENTS // max(per_item, 1)))


class Scratch:
    """Lazily allocated scratch buffers of ``[rows, *shape]`` reused across chunks."""

    def __init__(self, rows: int, device: torch.device) -> None:
        self.rows = rows
        self.device = device
        self._buffers: dict[str, torch.Tensor] = {}

    def get(
        self, name: str, shape: tuple[int, ...], n: int, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """Buffer ``name`` shaped ``[n, *shape]`` (a leading slice of the allocation)."""
        buf = self._buffers.get(name)
        if buf is None:
            buf = torch.empty((self.rows, *shape), dtype=dtype, device=self.device)
            self._buffers[name] = buf
        return buf[:n]
