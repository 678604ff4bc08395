"""``vllm_ascend::attention_with_kv_update``: an attention layer's KV-cache write and its attention
in one op call (the ``kv_cache_attention`` pass's replacement of vLLM's two ops).
"""
# On the host CPU it calls vLLM's CPU attention kernels directly (bit-identical); otherwise vLLM's
# own op bodies in order (README, "Where each kind of change goes": one attention call per layer).

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.distributed.kv_transfer import has_kv_transfer_group
from vllm.forward_context import get_forward_context
from vllm.utils.torch_utils import LayerNameType, _resolve_layer_name

from vllm_ascend.base.amx_permission import ensure_amx_permission

OP_NAMESPACE = "vllm_ascend"
OP_NAME = "attention_with_kv_update"

# Attribute of an attention layer holding its CPUAttentionKernels (or False: not eligible).
_KERNELS_ATTR = "_ascend_cpu_attention_kernels"


def register_attention_op() -> bool:
    """Define ``vllm_ascend::attention_with_kv_update`` once per process; True when defined now."""
    # The schema is inferred so layer_name has the type vLLM's attention ops use in this build.
    if hasattr(getattr(torch.ops, OP_NAMESPACE), OP_NAME):
        return False
    qualname = f"{OP_NAMESPACE}::{OP_NAME}"
    schema = torch.library.infer_schema(attention_with_kv_update, mutates_args={"output"})
    torch.library.define(qualname, schema)
    torch.library.impl(qualname, "CompositeExplicitAutograd", attention_with_kv_update)
    torch.library.register_fake(qualname, _attention_with_kv_update_fake)
    return True


def attention_op_handles() -> tuple[Any, Any, Any] | None:
    """(vLLM's KV update op, vLLM's attention op, the fused op); None when vLLM lacks either."""
    import vllm.model_executor.layers.attention.attention  # noqa: F401  (defines the ops)

    register_attention_op()
    ops = torch.ops.vllm
    try:
        return (ops.unified_kv_cache_update.default, ops.unified_attention_with_output.default,
                getattr(torch.ops, OP_NAMESPACE).attention_with_kv_update.default)
    except (AttributeError, RuntimeError):
        return None


def attention_with_kv_update(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output: torch.Tensor,
    layer_name: LayerNameType,
) -> None:
    """Write ``key``/``value`` to the layer's KV cache, then attend ``query`` into ``output``."""
    name = _resolve_layer_name(layer_name)
    context = get_forward_context()
    layer = context.no_compile_layers[name]
    kernels = getattr(layer, _KERNELS_ATTR, None)
    if kernels is None:  # this layer's first call
        # Either path runs vLLM's CPU kernels, AMX where the CPU has it: the process must have
        # asked Linux for it first, whatever ran before this op (base.amx_permission).
        ensure_amx_permission()
        kernels = CPUAttentionKernels.for_layer(layer) or False
        setattr(layer, _KERNELS_ATTR, kernels)
    if not isinstance(kernels, CPUAttentionKernels) or has_kv_transfer_group():
        _vllm_bodies(query, key, value, output, layer_name)
        return
    slots = context.slot_mapping
    per_layer = context.attn_metadata
    if isinstance(per_layer, list):  # speculative decoding: [0] is the base model's
        per_layer = per_layer[0]
    if isinstance(slots, list):
        slots = slots[0]
    kernels.run(layer, query, key, value, output, per_layer[name], slots.get(name))


def _attention_with_kv_update_fake(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output: torch.Tensor,
    layer_name: LayerNameType,
) -> None:
    return None


def _vllm_bodies(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 output: torch.Tensor, layer_name: Any) -> None:
    from vllm.model_executor.layers.attention.attention import (
        unified_attention_with_output,
        unified_kv_cache_update,
    )

    dependency = unified_kv_cache_update(key, value, layer_name)
    unified_attention_with_output(query, key, value, output, layer_name,
                                  kv_cache_dummy_dep=dependency)


@dataclass
class CPUAttentionKernels:
    """vLLM's CPU attention backend for one layer, called without its Python wrappers."""

    impl: Any
    cache: torch.Tensor | None = None
    key_cache: torch.Tensor | None = None
    value_cache: torch.Tensor | None = None

    @classmethod
    def for_layer(cls, layer: Any) -> CPUAttentionKernels | None:
        """Kernels for a sink-free decoder ``layer`` of vLLM's CPU backend; None otherwise."""
        try:
            from vllm.v1.attention.backend import AttentionType
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl
        except ImportError:
            return None
        impl = getattr(layer, "impl", None)
        eligible = (
            type(impl) is CPUAttentionBackendImpl
            and impl.attn_type == AttentionType.DECODER
            and impl.sinks is None
            and hasattr(layer, "isa")
        )
        return cls(impl) if eligible else None

    def views(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value halves of ``kv_cache`` ([blocks, kv heads, block, 2 * head])."""
        if self.cache is not kv_cache:
            blocks, heads, block_size, _ = kv_cache.size()
            keys, values = kv_cache.view(blocks, heads, block_size * 2, -1).chunk(2, dim=2)
            self.cache, self.key_cache, self.value_cache = kv_cache, keys, values
        assert self.key_cache is not None and self.value_cache is not None
        return self.key_cache, self.value_cache

    def run(self, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            output: torch.Tensor, metadata: Any, slot_mapping: torch.Tensor | None) -> None:
        """vLLM's two ops here: the cache write when there are slots, attention when metadata."""
        impl = self.impl
        if slot_mapping is None and metadata is None:
            return  # nothing to write nor to attend (the cache may be a placeholder then)
        key_cache, value_cache = self.views(layer.kv_cache)
        if slot_mapping is not None:
            torch.ops._C.cpu_attn_reshape_and_cache(
                key, value, key_cache, value_cache, slot_mapping, layer.isa,
                layer._k_scale_float, layer._v_scale_float, impl.kv_cache_dtype,
            )
        if metadata is None:  # warm-up and profiling runs
            return
        tokens = metadata.num_actual_tokens
        if tokens != query.shape[0]:
            query, output = query[:tokens], output[:tokens]
        torch.ops._C.cpu_attention_with_kv_cache(
            query, key_cache, value_cache, output, metadata.query_start_loc, metadata.seq_lens,
            impl.scale, metadata.causal, impl.alibi_slopes, impl.sliding_window,
            metadata.block_table, impl.logits_soft_cap, metadata.scheduler_metadata, None,
            metadata.dynamic_causal, layer._k_scale_float, layer._v_scale_float,
            impl.kv_cache_dtype,
        )
