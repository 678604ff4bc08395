"""The MoE communication method decision (pure) and the MC2 token budget (one per engine)."""
# Host-CPU row (SoC "cpu"): with EP, ALLGATHER for decode-sized DP-wide batches, ALLTOALL above,
# mirroring A3's split so every serving run exercises both.

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

MEGA_MOE_TOKENS_PER_RANK = 4096
DISPATCH_FFN_COMBINE_TOKENS_PER_RANK = 512
MC2_TOKENS_PER_RANK = 512
A2_MAX_EXPERTS_PER_DEVICE = 24
A2_MIN_EP_FOR_MC2 = 16
A3_FUSED_MC2_MAX_EP = 32
A3_FUSED_MC2_MAX_EP_MEGAMOE = 64


class MoECommType(enum.IntEnum):
    ALLGATHER = 0
    MC2 = 1
    ALLTOALL = 2
    FUSED_MC2 = 3


@dataclass(frozen=True)
class MoECommInputs:
    """Everything the decision depends on, as plain values."""

    soc: str
    is_moe: bool
    enable_expert_parallel: bool = False
    ep_group_size: int = 1
    has_lora: bool = False
    world_size_across_dp: int = 1
    pipeline_parallel_size: int = 1
    num_experts: int = 0
    num_experts_per_tok: int = 0
    enable_fused_mc2: int = 0
    megamoe_available: bool = False
    mc2_capacity: int = 0
    decode_tokens: int = 0  # host CPU: most tokens of a decode-only forward


def select_moe_comm_method(num_tokens: int | None, inputs: MoECommInputs) -> MoECommType | None:
    """The MoE communication method (first matching row wins) for the DP-wide ``num_tokens``."""
    fits = num_tokens is None or num_tokens <= inputs.mc2_capacity
    if not inputs.is_moe:  # row 1
        return None
    if not inputs.enable_expert_parallel or inputs.ep_group_size == 1:  # row 2
        return MoECommType.ALLGATHER
    if inputs.has_lora:  # row 3: fused paths cannot be LoRA-patched
        return MoECommType.ALLTOALL
    soc = inputs.soc
    if soc == "A2":  # rows 4-5
        ep = inputs.world_size_across_dp // max(inputs.pipeline_parallel_size, 1)
        per_device = inputs.num_experts // max(ep, 1)
        if per_device <= A2_MAX_EXPERTS_PER_DEVICE and ep >= A2_MIN_EP_FOR_MC2 and fits:
            return MoECommType.MC2
        return MoECommType.ALLGATHER
    if soc == "A3":  # rows 6-8
        max_ep = A3_FUSED_MC2_MAX_EP_MEGAMOE if inputs.megamoe_available else A3_FUSED_MC2_MAX_EP
        if inputs.enable_fused_mc2 == 1 and inputs.ep_group_size <= max_ep:
            return MoECommType.FUSED_MC2
        return MoECommType.MC2 if fits else MoECommType.ALLTOALL
    if soc == "A5":  # rows 9-11
        if fits and inputs.world_size_across_dp > 1:
            return MoECommType.MC2
        top_k = inputs.num_experts_per_tok or 1
        if inputs.world_size_across_dp <= top_k:
            return MoECommType.ALLGATHER
        return MoECommType.ALLTOALL
    if soc == "310P":  # row 12
        return MoECommType.ALLGATHER
    if soc == "cpu":  # the host-CPU platform (module docstring): no MC2 without an NPU
        if num_tokens is None or num_tokens <= inputs.decode_tokens:
            return MoECommType.ALLGATHER
        return MoECommType.ALLTOALL
    raise ValueError(
        f"no MoE communication method for SoC {soc!r}; allowed: A2, A3, A5, 310P, cpu"
    )


def mc2_tokens_capacity(
    *,
    tensor_parallel_size: int,
    max_num_reqs: int,
    uniform_decode_query_len: int,
    max_num_batched_tokens: int = 0,
    enable_prefill_mc2: bool = False,
    max_capture_size: int | None = None,
    enable_fused_mc2: int = 0,
    megamoe_available: bool = False,
) -> int:
    """Tokens MC2 buffers must hold across the TP group (as the existing plugin sizes them)."""
    if enable_prefill_mc2:
        base = max_num_batched_tokens
    elif max_capture_size:
        base = max_capture_size
    else:
        base = max_num_reqs * uniform_decode_query_len
    tp = max(tensor_parallel_size, 1)
    per_rank = math.ceil(base / tp)
    if enable_fused_mc2 and megamoe_available:
        limit = MEGA_MOE_TOKENS_PER_RANK
    elif enable_fused_mc2:
        limit = DISPATCH_FFN_COMBINE_TOKENS_PER_RANK
    else:
        limit = MC2_TOKENS_PER_RANK
    return min(per_rank, limit) * tp


class Mc2Budget:
    """The MC2 token capacity and the reusable MC2 mask of one engine."""

    def __init__(self, capacity: int, mask_len: int | None, device: Any = "cpu") -> None:
        self.capacity = capacity
        self._mask: Any = None
        if mask_len:
            import torch

            self._mask = torch.zeros(mask_len, dtype=torch.bool, device=device)

    @property
    def has_mask(self) -> bool:
        return self._mask is not None

    def mask_for(self, padded_num_tokens: int, num_actual_tokens: int) -> Any:
        """First ``padded_num_tokens`` entries, True for the actual tokens (reuses the buffer)."""
        if self._mask is None:
            return None
        mask = self._mask[:padded_num_tokens]
        mask[:num_actual_tokens] = True
        mask[num_actual_tokens:] = False
        return mask


def padded_to_tp(num_tokens: int | None, tensor_parallel_size: int) -> int | None:
    """``ceil(num_tokens / tp) * tp`` (None stays None)."""
    if num_tokens is None:
        return None
    tp = max(tensor_parallel_size, 1)
    return math.ceil(num_tokens / tp) * tp
