"""Attention layers of vLLM's real CPU backend outside a model, for tests and benchmarks of the
attention ops: a layer with its KV cache, the metadata of a step, and its forward context.

Request ``i`` of a step owns block ``i`` of the cache, so its token ``t`` sits in slot
``i * block + t``.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class AttentionShape:
    """Heads, KV heads and head size of a layer; block size and block count of its cache."""

    heads: int = 4
    kv_heads: int = 2
    head: int = 64
    block: int = 32
    blocks: int = 4

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head)


def cpu_attention_layer(vllm_config: Any, shape: AttentionShape, impl_cls: type | None = None,
                        **impl_kw: Any) -> Any:
    """A bf16 layer of vLLM's CPU attention backend (or ``impl_cls``) with a zeroed KV cache,
    as the attention ops see it through the forward context; the process has asked for AMX
    (``base.amx_permission``) before any of the layer's kernels runs."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl, _get_attn_isa
    from vllm_ascend.base.amx_permission import ensure_amx_permission

    ensure_amx_permission()  # the layer's kernels run AMX where the CPU has it
    with set_current_vllm_config(vllm_config):
        impl = (impl_cls or CPUAttentionBackendImpl)(
            num_heads=shape.heads, head_size=shape.head, scale=shape.scale,
            num_kv_heads=shape.kv_heads, alibi_slopes=None, sliding_window=None,
            kv_cache_dtype="auto", **impl_kw,
        )
    cache = torch.zeros(shape.blocks, shape.kv_heads, shape.block, 2 * shape.head,
                        dtype=torch.bfloat16)
    return types.SimpleNamespace(
        impl=impl, isa=_get_attn_isa(torch.bfloat16, shape.block, shape.head), kv_cache=cache,
        _k_scale_float=1.0, _v_scale_float=1.0,
    )


def cpu_attention_metadata(query_lens: list[int], seq_lens: list[int], shape: AttentionShape,
                           isa: str) -> Any:
    """The CPU backend's metadata of a causal step: request ``i`` brings ``query_lens[i]`` new
    tokens and then holds ``seq_lens[i]`` in all."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    seqs = torch.tensor(seq_lens, dtype=torch.int32)
    slots = torch.cat([torch.arange(s - q, s) + i * shape.block
                       for i, (q, s) in enumerate(zip(query_lens, seq_lens, strict=True))])
    scheduler = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(query_lens), num_heads=shape.heads, num_kv_heads=shape.kv_heads,
        head_dim=shape.head, seq_lens=seqs, dtype=torch.bfloat16, query_start_loc=starts,
        causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=False,
    )
    return CPUAttentionMetadata(
        num_actual_tokens=int(starts[-1]), max_query_len=max(query_lens), query_start_loc=starts,
        max_seq_len=max(seq_lens), seq_lens=seqs,
        block_table=torch.arange(len(query_lens), dtype=torch.int32)[:, None],
        slot_mapping=slots.long(), scheduler_metadata=scheduler,
    )


def attention_context(name: str, layer: Any, metadata: Any) -> Any:
    """vLLM's forward context of one step holding this one layer (enter it with vLLM's
    ``override_forward_context``)."""
    from vllm.forward_context import ForwardContext

    slots = None if metadata is None else metadata.slot_mapping
    return ForwardContext(no_compile_layers={name: layer}, attn_metadata={name: metadata},
                          slot_mapping={} if slots is None else {name: slots})


def layer_name(name: str) -> Any:
    """``name`` as vLLM's attention ops take it in this vLLM/torch (``LayerName`` or str)."""
    from vllm.utils.torch_utils import LayerNameType

    return LayerNameType(name)  # type: ignore[operator]  # a class in this vLLM, not a union


def vllm_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   output: torch.Tensor, name: Any) -> None:
    """What vLLM's attention layer calls: the KV-cache update op, then the attention op."""
    import vllm.model_executor.layers.attention.attention  # noqa: F401  (defines the ops)

    dependency = torch.ops.vllm.unified_kv_cache_update.default(key, value, name)
    torch.ops.vllm.unified_attention_with_output.default(query, key, value, output, name,
                                                         None, None, dependency)


def fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    output: torch.Tensor, name: Any) -> None:
    """The one op the ``kv_cache_attention`` pass puts in their place."""
    from vllm_ascend.ops.attention_kv import register_attention_op

    register_attention_op()
    torch.ops.vllm_ascend.attention_with_kv_update.default(query, key, value, output, name)
