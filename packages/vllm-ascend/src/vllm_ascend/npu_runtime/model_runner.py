"""``NPUModelRunner``: vLLM's V1 ``GPUModelRunner`` on an NPU.

The parent's CUDA calls (streams, events) and ``torch.accelerator`` memory calls reach
``torch.npu`` through the worker's scoped rebinding (``bindings``), which is active whenever
vLLM calls into the worker. What differs from the GPU runner is here: the Ascend backend's
per-layer KV cache view, and zeroing newly allocated KV blocks without Triton.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from vllm_ascend.npu_runtime.attention.kv_layout import split_kv_view


class NPUModelRunner(GPUModelRunner):
    """vLLM's V1 model runner with the Ascend KV cache layout."""

    def initialize_kv_cache_tensors(
        self, kv_cache_config: KVCacheConfig, kernel_block_sizes: list[int],
        kv_cache_allocation_context: AbstractContextManager[Any] | None = None,
    ) -> dict[str, torch.Tensor]:
        """vLLM allocates and binds the caches; each attention layer then gets its memory as
        ``(2, num_blocks, block_size, num_kv_heads, head_size)`` (see ``kv_layout``)."""
        kv_caches = super().initialize_kv_cache_tensors(
            kv_cache_config, kernel_block_sizes, kv_cache_allocation_context
        )
        context = self.compilation_config.static_forward_context
        split = {name: split_kv_view(kv) for name, kv in kv_caches.items()}
        for name, kv in split.items():
            context[name].kv_cache = kv
        self.kv_caches[:] = [split_kv_view(kv) for kv in self.kv_caches]
        return split

    def _init_kv_zero_meta(self) -> None:
        """Nothing to precompute: :meth:`_zero_block_ids` zeroes per layer."""

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        """Zero newly allocated blocks of every full-attention layer (vLLM's Triton kernel
        writes through raw addresses; here each layer's keys and values are zeroed)."""
        if not block_ids:
            return
        index = torch.tensor(block_ids, dtype=torch.int64, device=self.device)
        seen: set[int] = set()
        for group in self.kv_cache_config.kv_cache_groups:
            if not isinstance(group.kv_cache_spec, FullAttentionSpec):
                continue
            for name in group.layer_names:
                layer = self.compilation_config.static_forward_context.get(name)
                kv = getattr(layer, "kv_cache", None)
                if not isinstance(kv, torch.Tensor) or kv.dim() != 5 or id(kv) in seen:
                    continue
                seen.add(id(kv))
                kv.index_fill_(1, index, 0)
