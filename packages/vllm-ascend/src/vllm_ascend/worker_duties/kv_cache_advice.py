"""The error raised when the KV cache does not fit, with what would fit (host CPU and NPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


class KvCacheMemoryError(ValueError):
    """The KV cache of the requested ``max_model_len`` / ``max_num_seqs`` does not fit."""


@dataclass(frozen=True)
class KvCacheNeed:
    """One rank's KV-cache need: one block's bytes over all its attention layers (+1 null block)."""

    block_bytes: int
    block_size: int
    max_model_len: int
    max_num_seqs: int

    def __post_init__(self) -> None:
        for name in ("block_bytes", "block_size", "max_model_len", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} is not allowed; at least 1")

    @property
    def blocks_per_sequence(self) -> int:
        return math.ceil(self.max_model_len / self.block_size)

    @property
    def token_bytes(self) -> float:
        return self.block_bytes / self.block_size

    @property
    def sequence_bytes(self) -> int:
        """One sequence of ``max_model_len`` plus the null block: the least vLLM starts with."""
        return self.block_bytes * (self.blocks_per_sequence + 1)

    @property
    def all_sequences_bytes(self) -> int:
        """``max_num_seqs`` sequences of ``max_model_len`` at once, plus the null block."""
        return self.block_bytes * (self.max_num_seqs * self.blocks_per_sequence + 1)


def need_of(vllm_config: Any) -> KvCacheNeed:
    """What one rank of ``vllm_config`` needs per block (MLA: one latent cache)."""
    import torch
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    model, cache = vllm_config.model_config, vllm_config.cache_config
    parallel = vllm_config.parallel_config
    dtype = model.dtype if cache.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE.get(
        cache.cache_dtype, model.dtype)  # formats vLLM sizes specially: model dtype, not less
    itemsize = torch.empty((), dtype=dtype).element_size()
    layers = 0 if model.is_attention_free else model.get_num_layers(parallel)
    kv_parts = 1 if getattr(model, "use_mla", False) else 2
    token_bytes = layers * kv_parts * model.get_num_kv_heads(parallel) * model.get_head_size()
    return KvCacheNeed(
        block_bytes=max(1, token_bytes * itemsize * cache.block_size),
        block_size=cache.block_size,
        max_model_len=model.max_model_len,
        max_num_seqs=vllm_config.scheduler_config.max_num_seqs,
    )


@dataclass(frozen=True)
class KvCacheFit:
    """The largest settings that fit in an amount of memory (0: nothing fits)."""

    max_model_len_one_seq: int
    max_model_len_all_seqs: int
    max_num_seqs_at_len: int


def largest_fit(need: KvCacheNeed, available_bytes: int) -> KvCacheFit:
    """The largest ``max_model_len`` (1 and n sequences) and ``max_num_seqs`` that fit."""
    blocks = max(0, available_bytes) // need.block_bytes - 1  # minus vLLM's null block
    blocks = max(0, blocks)
    return KvCacheFit(
        max_model_len_one_seq=blocks * need.block_size,
        max_model_len_all_seqs=(blocks // need.max_num_seqs) * need.block_size,
        max_num_seqs_at_len=blocks // need.blocks_per_sequence,
    )


def format_size(n_bytes: float) -> str:
    """``n_bytes`` as GiB, MiB or KiB (never negative: below zero is 0)."""
    n = max(0.0, float(n_bytes))
    for unit, size in (("GiB", GiB), ("MiB", MiB)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n / KiB:.1f} KiB"


def kv_cache_advice(need: KvCacheNeed, available_bytes: int, *, measured: str,
                    more_memory: str) -> str:
    """The message; ``measured`` says where the bytes came from, ``more_memory`` how to add some."""
    fit = largest_fit(need, available_bytes)
    lines = [
        f"the KV cache does not fit: {format_size(available_bytes)} is available for it "
        f"({measured}).",
        f"The model needs {format_size(need.token_bytes)} per token: one sequence of "
        f"max_model_len={need.max_model_len} needs {format_size(need.sequence_bytes)} and "
        f"max_num_seqs={need.max_num_seqs} such sequences need "
        f"{format_size(need.all_sequences_bytes)}.",
    ]
    if fit.max_model_len_one_seq == 0:
        lines.append(
            f"Not even one block of {need.block_size} tokens "
            f"({format_size(2 * need.block_bytes)} with vLLM's null block) fits: free memory or "
            f"give the KV cache more with {more_memory}."
        )
    else:
        options = [f"--max-model-len {fit.max_model_len_one_seq} (one sequence at a time)"]
        if fit.max_model_len_all_seqs > 0:
            options.append(f"--max-model-len {fit.max_model_len_all_seqs} with "
                           f"--max-num-seqs {need.max_num_seqs}")
        if fit.max_num_seqs_at_len > 0:
            options.append(f"--max-num-seqs {fit.max_num_seqs_at_len} at "
                           f"--max-model-len {need.max_model_len}")
        lines.append(f"Largest that fit: {'; '.join(options)}. Or free memory, or give the KV "
                     f"cache more with {more_memory}.")
    return " ".join(lines)


def kv_cache_memory_error(need: KvCacheNeed, available_bytes: int, *, measured: str,
                          more_memory: str) -> KvCacheMemoryError:
    """:class:`KvCacheMemoryError` carrying :func:`kv_cache_advice`'s message."""
    return KvCacheMemoryError(
        kv_cache_advice(need, available_bytes, measured=measured, more_memory=more_memory))
