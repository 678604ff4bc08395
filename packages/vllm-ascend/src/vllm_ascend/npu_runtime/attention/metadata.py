"""Per-step attention metadata of the Ascend backend and its builder.

The kernels take the per-sequence query ends and KV lengths as host integer lists (FIA's
``actual_seq_lengths`` / ``actual_seq_lengths_kv`` in TND layout), so the builder reads them
from vLLM's host copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)


@dataclass
class AscendMetadata(AttentionMetadata):
    """One step's batch: ``query_ends[i]`` is the end of sequence i's query tokens in the
    flattened batch, ``seq_lens[i]`` its KV length with this step's tokens included."""

    num_actual_tokens: int
    query_ends: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor
    slot_mapping: torch.Tensor


def host_seq_lens(common: CommonAttentionMetadata, exact_host_copy: bool) -> list[int]:
    """KV length per sequence. vLLM's host upper bound is exact unless speculative decoding
    may reject drafts (``exact_host_copy`` False): then the device values are read."""
    n = common.num_reqs
    if exact_host_copy and common.seq_lens_cpu_upper_bound is not None:
        return [int(x) for x in common.seq_lens_cpu_upper_bound[:n].tolist()]
    return [int(x) for x in common.seq_lens[:n].tolist()]


class AscendMetadataBuilder(AttentionMetadataBuilder[AscendMetadata]):
    """Builds :class:`AscendMetadata` from vLLM's common metadata (eager only: no graphs)."""

    _cudagraph_support = AttentionCGSupport.NEVER

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._exact_host_seq_lens = vllm_config.speculative_config is None

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AscendMetadata:
        common = common_attn_metadata
        n = common.num_reqs
        query_ends = [int(x) for x in common.query_start_loc_cpu[1:n + 1].tolist()]
        return AscendMetadata(
            num_actual_tokens=common.num_actual_tokens,
            query_ends=query_ends,
            seq_lens=host_seq_lens(common, self._exact_host_seq_lens),
            block_table=common.block_table_tensor[:n],
            slot_mapping=common.slot_mapping,
        )
