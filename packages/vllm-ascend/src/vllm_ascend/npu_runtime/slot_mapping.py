"""Pure-torch replacement of vLLM's Triton slot-mapping kernel, called with its launch arguments."""
# No host sync: num_tokens is vLLM's host integer and repeat_interleave is given its output size.

from __future__ import annotations

import torch

SLOT_MAPPING_KERNEL = "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"


def compute_slot_mapping(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: torch.Tensor,  # [num_reqs + 1] int32
    positions: torch.Tensor,  # [num_tokens] int64
    block_table: torch.Tensor,  # [max_num_reqs, max_blocks_per_req] int32
    block_table_stride: int,
    slot_mapping: torch.Tensor,  # [max_num_tokens] int64, written
    KV_CACHE_BLOCK_SIZE: int,  # the Triton kernel's parameter names
    TOTAL_CP_WORLD_SIZE: int = 1,
    TOTAL_CP_RANK: int = 0,
    CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,
    PAD_ID: int = -1,
    BLOCK_SIZE: int = 1024,
) -> None:
    """Each query token's slot (``block_table[req, pos // block_size] * block_size + pos %
    block_size``); slots from ``num_tokens`` to ``max_num_tokens`` get ``PAD_ID``."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("the NPU runtime does not support context parallelism")
    num_reqs = query_start_loc.shape[0] - 1
    if num_reqs > 0 and num_tokens > 0:
        lengths = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)
        req_of_token = torch.repeat_interleave(
            torch.arange(num_reqs, device=positions.device), lengths, output_size=num_tokens
        )
        pos = positions[:num_tokens].to(torch.int64)
        blocks = block_table.reshape(-1, block_table_stride)[req_of_token,
                                                             pos // KV_CACHE_BLOCK_SIZE]
        slot_mapping[:num_tokens] = blocks.to(torch.int64) * KV_CACHE_BLOCK_SIZE + (
            pos % KV_CACHE_BLOCK_SIZE
        )
    slot_mapping[num_tokens:max_num_tokens] = PAD_ID
