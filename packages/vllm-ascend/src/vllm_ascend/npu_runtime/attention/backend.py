"""``AscendAttentionBackend``: what vLLM asks an attention backend (name, classes, sizes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.v1.attention.backend import AttentionBackend, AttentionType
from vllm.v1.kv_cache_interface import KVCacheLayout

from vllm_ascend.npu_runtime.attention.impl import AscendAttentionImpl
from vllm_ascend.npu_runtime.attention.kv_layout import BLOCK_SIZE, kv_cache_shape
from vllm_ascend.npu_runtime.attention.metadata import AscendMetadataBuilder

if TYPE_CHECKING:
    from vllm.config.cache import CacheDType

    from vllm_ascend.npu_runtime.attention.impl import AscendAttentionImpl
    from vllm_ascend.npu_runtime.attention.metadata import AscendMetadataBuilder

BACKEND_NAME = "ASCEND"


class AscendAttentionBackend(AttentionBackend):
    """Decoder self-attention over a paged cache, every attention state in one kernel."""

    accept_output_buffer: bool = True
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type[AscendAttentionImpl]:
        return AscendAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[AscendMetadataBuilder]:
        return AscendMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: object = None) -> list[int]:  # type: ignore[override]
        return [BLOCK_SIZE]

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        return (KVCacheLayout.LBNHC,)  # layer outermost: each layer's K and V are dense runs

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> tuple[int, ...]:
        """The per-layer cache shape the impl reads (see ``kv_layout``)."""
        return kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size)
