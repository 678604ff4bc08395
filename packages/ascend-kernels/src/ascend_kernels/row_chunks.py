"""Row-chunked iteration shared by the reference kernels.

The reference ops process a few rows at a time in float32 scratch buffers that stay in cache,
so a fused op reads its inputs and writes its outputs exactly once, and the fused op and its
unfused composition run the very same per-chunk arithmetic (hence bit-identical results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


def chunks(n: int, per_item: int, multiple: int = 1) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` ranges over ``n`` items of ``per_item`` elements each, about
    ``multiple * CHUNK_ELEMENTS`` elements per chunk."""
    step = chunk_rows(n, per_item, multiple)
    for start in range(0, n, step):
        yield start, min(start + step, n)


def chunk_rows(n: int, per_item: int, multiple: int = 1) -> int:
    """Largest chunk length that ``chunks`` yields for these sizes."""
    return max(1, min(n, multiple * CHUNK_ELEMENTS // max(per_item, 1)))


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


# A source of float32 row chunks ``(start, stop, rows32)`` of ``as_rows3(x)`` drawing on the
# given scratch: the plain input (``float32_chunks``) or an (add-)RMSNorm output
# (``ops_norm.normed_chunks``), so a quantizer runs the same loop fused and unfused.
RowSource = Callable[["Scratch"], Iterator[tuple[int, int, torch.Tensor]]]


def scratch_for(x: torch.Tensor) -> Scratch:
    """Scratch sized for the row chunks of ``as_rows3(x)``."""
    rows, inner, width = as_rows3(x).shape
    return Scratch(chunk_rows(rows, inner * width), x.device)


def upcast(src: torch.Tensor, scratch: Scratch, name: str) -> torch.Tensor:
    """``src`` as float32: itself when already float32, else a scratch copy."""
    if src.dtype == torch.float32:
        return src
    buf = scratch.get(name, tuple(src.shape[1:]), src.shape[0])
    return buf.copy_(src)


def float32_chunks(x: torch.Tensor, scratch: Scratch) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Yield ``(start, stop, x32)``: each row chunk of ``as_rows3(x)`` as float32."""
    x3 = as_rows3(x)
    rows, inner, width = x3.shape
    for start, stop in chunks(rows, inner * width):
        yield start, stop, upcast(x3[start:stop], scratch, "src")
