"""MoE communication decision table and MC2 capacity."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from vllm_ascend.distributed.moe_comm import (
    Mc2Budget,
    MoECommInputs,
    MoECommType,
    mc2_tokens_capacity,
    padded_to_tp,
    select_moe_comm_method,
)

A = MoECommType
EP = MoECommInputs(soc="A2", is_moe=True, enable_expert_parallel=True, ep_group_size=16,
                   world_size_across_dp=16, num_experts=128, mc2_capacity=128)
# The host-CPU platform with EP over 2 ranks and max_num_seqs 8 (decode budget 8 tokens).
CPU = MoECommInputs(soc="cpu", is_moe=True, enable_expert_parallel=True, ep_group_size=2,
                    world_size_across_dp=2, num_experts=4, num_experts_per_tok=2,
                    mc2_capacity=512, decode_tokens=8)


@pytest.mark.parametrize(
    ("inputs", "tokens", "expected"),
    [
        # row 1: dense models have no MoE communication
        (replace(EP, is_moe=False), 128, None),
        # row 2: EP off, or an EP group of one
        (replace(EP, enable_expert_parallel=False), 128, A.ALLGATHER),
        (replace(EP, ep_group_size=1), 128, A.ALLGATHER),
        # row 3: LoRA
        (replace(EP, has_lora=True), 128, A.ALLTOALL),
        # rows 4-5: A2 (cap 128, ep 16, 128 experts)
        (EP, 128, A.MC2),
        (EP, 129, A.ALLGATHER),
        (EP, None, A.MC2),
        (replace(EP, num_experts=512), 128, A.ALLGATHER),  # 32 experts per device
        (replace(EP, world_size_across_dp=8, ep_group_size=8, num_experts=64), 8, A.ALLGATHER),
        # rows 6-8: A3
        (replace(EP, soc="A3", enable_fused_mc2=1, ep_group_size=8), 128, A.FUSED_MC2),
        (replace(EP, soc="A3", enable_fused_mc2=1, ep_group_size=8), 4097, A.FUSED_MC2),
        (replace(EP, soc="A3", enable_fused_mc2=1, ep_group_size=128), 128, A.MC2),
        (replace(EP, soc="A3", enable_fused_mc2=1, ep_group_size=128), 4097, A.ALLTOALL),
        (replace(EP, soc="A3", enable_fused_mc2=1, ep_group_size=64), 8, A.MC2),
        (replace(EP, soc="A3", enable_fused_mc2=1, ep_group_size=64, megamoe_available=True),
         8, A.FUSED_MC2),
        (replace(EP, soc="A3"), 128, A.MC2),
        (replace(EP, soc="A3"), 129, A.ALLTOALL),
        # rows 9-11: A5
        (replace(EP, soc="A5", world_size_across_dp=4, num_experts_per_tok=2), 128, A.MC2),
        (replace(EP, soc="A5", world_size_across_dp=2, num_experts_per_tok=4), 129,
         A.ALLGATHER),
        (replace(EP, soc="A5", world_size_across_dp=8, num_experts_per_tok=4), 129,
         A.ALLTOALL),
        (replace(EP, soc="A5", world_size_across_dp=1, num_experts_per_tok=0), 1, A.ALLGATHER),
        # row 12
        (replace(EP, soc="310P"), 128, A.ALLGATHER),
        # the host-CPU row: decode-sized forwards (<= decode_tokens) ALLGATHER, larger ALLTOALL,
        # never MC2 (even where A2/A3/A5 would pick it: it needs NPU hardware)
        (CPU, 7, A.ALLGATHER),
        (CPU, 8, A.ALLGATHER),
        (CPU, 9, A.ALLTOALL),
        (CPU, 100000, A.ALLTOALL),
        (CPU, None, A.ALLGATHER),
        (CPU, 0, A.ALLGATHER),
        (replace(CPU, decode_tokens=0), 1, A.ALLTOALL),
        (replace(CPU, enable_fused_mc2=1, mc2_capacity=4096), 9, A.ALLTOALL),
        (replace(CPU, enable_expert_parallel=False), 9, A.ALLGATHER),  # row 2 first
        (replace(CPU, ep_group_size=1), 9, A.ALLGATHER),
        (replace(CPU, has_lora=True), 8, A.ALLTOALL),  # row 3 first
        (replace(CPU, is_moe=False), 9, None),
    ],
)
def test_decision_table(inputs, tokens, expected) -> None:
    assert select_moe_comm_method(tokens, inputs) is expected


def test_unknown_soc_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"SoC 'B9'.*allowed: A2, A3, A5, 310P, cpu"):
        select_moe_comm_method(1, replace(EP, soc="B9"))


@pytest.mark.parametrize(
    ("kwargs", "capacity"),
    [
        ({"tensor_parallel_size": 6, "max_num_reqs": 200, "uniform_decode_query_len": 3}, 600),
        ({"tensor_parallel_size": 8, "max_num_reqs": 1, "uniform_decode_query_len": 1,
          "max_capture_size": 257}, 264),
        ({"tensor_parallel_size": 8, "max_num_reqs": 1, "uniform_decode_query_len": 1,
          "enable_prefill_mc2": True, "max_num_batched_tokens": 513}, 520),
        ({"tensor_parallel_size": 1, "max_num_reqs": 1000, "uniform_decode_query_len": 1}, 512),
        ({"tensor_parallel_size": 1, "max_num_reqs": 9000, "uniform_decode_query_len": 1,
          "enable_fused_mc2": 1, "megamoe_available": True}, 4096),
        ({"tensor_parallel_size": 2, "max_num_reqs": 9000, "uniform_decode_query_len": 1,
          "enable_fused_mc2": 1}, 1024),
    ],
)
def test_mc2_capacity(kwargs, capacity) -> None:
    assert mc2_tokens_capacity(**kwargs) == capacity


def test_budget_owns_its_mask() -> None:
    a, b = Mc2Budget(64, 16), Mc2Budget(64, 16)
    mask = a.mask_for(8, 5)
    assert mask.tolist() == [True] * 5 + [False] * 3 and mask.dtype == torch.bool
    assert a.mask_for(8, 2).tolist() == [True] * 2 + [False] * 6  # buffer reused, refilled
    assert not b._mask.any()  # engines do not share state
    assert Mc2Budget(64, None).mask_for(8, 5) is None


def test_padding() -> None:
    assert padded_to_tp(5, 4) == 8 and padded_to_tp(8, 4) == 8 and padded_to_tp(None, 4) is None
