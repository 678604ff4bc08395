"""refuse_unexecuted_moe_method: an MoE engine whose decision table picks a communication method
the NPU runtime does not execute stops at device init with one line, not at its first forward."""

from __future__ import annotations

import pytest
from vllm_ascend.base.forward_context import AscendForwardState
from vllm_ascend.distributed.moe_comm import Mc2Budget, MoECommInputs, MoECommType
from vllm_ascend.distributed.npu_moe import npu_comm_methods
from vllm_ascend.npu_runtime.model_support import (
    UnsupportedModelError,
    refuse_unexecuted_moe_method,
)


def _state(soc: str, *, ep: int, is_moe: bool = True) -> AscendForwardState:
    inputs = MoECommInputs(
        soc=soc, is_moe=is_moe, enable_expert_parallel=ep > 1, ep_group_size=ep,
        world_size_across_dp=ep, num_experts=8, num_experts_per_tok=2, mc2_capacity=512,
        decode_tokens=4)
    return AscendForwardState(inputs, Mc2Budget(512, None), comm_methods=npu_comm_methods())


def test_a2_expert_parallel_runs_allgather_for_every_forward() -> None:
    # A2 with EP 2 < 16: ALLGATHER for decode and prefill, which the runtime executes
    refuse_unexecuted_moe_method(_state("A2", ep=2), 2048)


def test_without_expert_parallel_every_soc_runs_allgather() -> None:
    for soc in ("A2", "A3", "A5", "310P"):
        refuse_unexecuted_moe_method(_state(soc, ep=1), 2048)


def test_a_dense_model_is_never_refused() -> None:
    refuse_unexecuted_moe_method(_state("A3", ep=2, is_moe=False), 2048)


@pytest.mark.parametrize("soc", ["A3", "A5"])
def test_mc2_for_decode_is_refused_naming_soc_method_and_what_runs(soc: str) -> None:
    assert MoECommType.MC2 not in npu_comm_methods()
    with pytest.raises(UnsupportedModelError) as err:
        refuse_unexecuted_moe_method(_state(soc, ep=2), 2048)
    text = str(err.value)
    assert "decode forwards (4 tokens)" in text and f"SoC {soc}" in text
    assert "method is MC2" in text and "ALLGATHER" in text
    assert "--enable-expert-parallel" in text and "\n" not in text
