"""``AscendAttentionImpl``: the KV-cache write and the attention of one layer."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.attention.backend import AttentionImpl, AttentionType

from vllm_ascend.npu_runtime.attention.metadata import AscendMetadata


class AscendAttentionImpl(AttentionImpl[AscendMetadata]):
    """Decoder self-attention (GQA when ``num_heads`` is a multiple of ``num_kv_heads``)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None,
                 kv_cache_dtype: str, logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None, **unsupported: Any) -> None:
        refused = {
            "alibi slopes": alibi_slopes is not None,
            "a sliding window": sliding_window is not None,
            "logits soft-capping": bool(logits_soft_cap),
            f"attention type {attn_type!r}": attn_type != AttentionType.DECODER,
            "attention sinks": sinks is not None,
            f"KV cache dtype {kv_cache_dtype!r}": kv_cache_dtype != "auto",
            f"options {sorted(unsupported)}": bool(unsupported),
        }
        found = [what for what, present in refused.items() if present]
        if found:
            raise NotImplementedError(
                f"the Ascend attention backend does not support {', '.join(found)}; it runs "
                "decoder self-attention (causal, GQA) with the model's dtype in the KV cache"
            )
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be a multiple of "
                             f"num_kv_heads={num_kv_heads}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Write this step's keys and values to their slots (negative slots are padding)."""
        if kv_cache.numel() == 0:
            return  # profiling run: no cache bound yet
        slots = slot_mapping[: key.shape[0]]  # the kernel writes rows 0..len(slots)-1
        torch.ops.ascend.reshape_and_cache(key, value, kv_cache[0], kv_cache[1], slots)

    def forward(self, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: AscendMetadata | None,
                output: torch.Tensor, output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("the Ascend attention backend does not fuse output "
                                      "quantization")
        if attn_metadata is None:
            return output  # profiling run
        n = attn_metadata.num_actual_tokens
        result = torch.ops.ascend.paged_attention(
            query[:n], kv_cache[0], kv_cache[1], attn_metadata.block_table,
            attn_metadata.query_ends, attn_metadata.seq_lens, self.scale,
        )
        output[:n].copy_(result.view_as(output[:n]))
        return output
