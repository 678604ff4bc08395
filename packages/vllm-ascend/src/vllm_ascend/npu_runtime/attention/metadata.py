"""Per-step attention metadata of the Ascend backend and its builder."""
# The kernels take query ends and KV lengths as host lists (FIA's TND actual_seq_lengths).

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)

from vllm_ascend.process.process_setup import current_process_setup

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheSpec

logger = logging.getLogger(__name__)


@dataclass
class AscendMetadata(AttentionMetadata):
    """One step's batch: per sequence, the end of its query tokens and its KV length."""

    num_actual_tokens: int
    query_ends: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor
    slot_mapping: torch.Tensor


def host_seq_lens(common: CommonAttentionMetadata, exact_host_copy: bool) -> list[int]:
    """KV length per sequence: vLLM's host copy, or the device's when drafts may be rejected."""
    n = common.num_reqs
    if exact_host_copy and common.seq_lens_cpu_upper_bound is not None:
        return [int(x) for x in common.seq_lens_cpu_upper_bound[:n].tolist()]
    return [int(x) for x in common.seq_lens[:n].tolist()]


def without_padding_queries(query_ends: list[int], seq_lens: list[int]) -> list[int]:
    """``query_ends`` with a padded graph batch's trailing padding requests given no tokens."""
    ends = list(query_ends)
    last_real = max((i for i, s in enumerate(seq_lens) if s > 0), default=-1)
    real_end = ends[last_real] if last_real >= 0 else 0
    for i in range(last_real + 1, len(ends)):
        ends[i] = real_end
    return ends


def fia_graph_refusal(vllm_config: VllmConfig, kv_cache_spec: AttentionSpec) -> str | None:
    """Why this model's attention cannot be a FULL-graph task (from shapes and dtypes), or None."""
    # Local: importing ascend_kernels looks torch_npu up and registers its kernels; that
    # belongs to a running NPU runtime, not to importing this module.
    from ascend_kernels.npu_loader import npu_registration
    from ascend_kernels.ops.attention import fia_unsupported_reason

    if npu_registration.module is None:
        why = npu_registration.error or "no torch_npu"
        return f"torch_npu's kernels are not registered ({why})"
    num_heads = vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config)
    head_size, dtype = kv_cache_spec.head_size, kv_cache_spec.dtype
    query = torch.empty(0, num_heads, head_size, dtype=dtype, device="meta")
    cache = torch.empty(0, kv_cache_spec.block_size, kv_cache_spec.num_kv_heads, head_size,
                        dtype=dtype, device="meta")
    return fia_unsupported_reason(query, cache)


class AscendMetadataBuilder(AttentionMetadataBuilder[AscendMetadata]):
    """Builds :class:`AscendMetadata` from vLLM's common attention metadata."""

    _cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    @classmethod
    def get_cudagraph_support(cls, vllm_config: VllmConfig,
                              kv_cache_spec: KVCacheSpec) -> AttentionCGSupport:
        """Uniform-decode FULL graphs when FIA runs the attention, else none (logged once)."""
        # The reference attention reads the host, which no graph may hold.
        # vLLM types this hook with the base KVCacheSpec but hands an attention group's spec.
        reason = fia_graph_refusal(vllm_config, kv_cache_spec)  # type: ignore[arg-type]
        if reason is None:
            return cls._cudagraph_support
        current_process_setup().log_once(
            f"NPU graphs: no FULL graph for this model's attention ({reason}); its FULL "
            "graph mode falls back to eager/piecewise", logger, logging.INFO)
        return AttentionCGSupport.NEVER

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: list[str],
                 vllm_config: VllmConfig,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._exact_host_seq_lens = vllm_config.speculative_config is None

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AscendMetadata:
        common = common_attn_metadata
        n = common.num_reqs
        query_ends = [int(x) for x in common.query_start_loc_cpu[1:n + 1].tolist()]
        seq_lens = host_seq_lens(common, self._exact_host_seq_lens)
        return AscendMetadata(
            num_actual_tokens=common.num_actual_tokens,
            query_ends=without_padding_queries(query_ends, seq_lens),
            seq_lens=seq_lens,
            block_table=common.block_table_tensor[:n],
            slot_mapping=common.slot_mapping,
        )
