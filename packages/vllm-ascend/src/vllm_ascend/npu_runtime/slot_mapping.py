"""Pure-torch replacement of vLLM's Triton slot-mapping kernel (``block_table.py``).

The NPU platform registers it through ``register_triton_kernel_overrides``: Triton has no NPU
backend in vLLM's V1 path. Called with the Triton kernel's launch arguments in its order.

It never synchronises the device with the host: the token count is the host integer vLLM
passes (``num_tokens``), and ``repeat_interleave`` is told its output size (without it, torch
reads the lengths back to size its output). Positions past ``num_tokens`` get ``PAD_ID`` as
vLLM's kernel gives them (vLLM also fills a padded batch's tail with -1 itself); the attention
backend turns them into real scratch slots before the scatter (``AscendAttentionImpl``).
"""

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
    """slot = block_table[req, pos // block_size] * block_size + pos % block_size for every
    token of every request (the requests' query tokens are the first ``num_tokens``); slots
    from ``num_tokens`` to ``max_num_tokens`` get ``PAD_ID``."""
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
