"""Ascend forward-context fields on real vLLM forward contexts."""

from __future__ import annotations

import types

import pytest
import torch
from vllm_ascend.base import forward_context as fc
from vllm_ascend.distributed.moe_comm import Mc2Budget, MoECommInputs, MoECommType
from vllm_ascend.engine.resolution import extract_facts


def _state(tp=4, dp=1, moe=True, soc="A3") -> fc.AscendForwardState:
    inputs = MoECommInputs(soc=soc, is_moe=moe, enable_expert_parallel=True, ep_group_size=8,
                           world_size_across_dp=8, mc2_capacity=128)
    return fc.AscendForwardState(inputs, Mc2Budget(128, 64 if moe else None), tp, dp)


def test_mrv2_fields() -> None:
    fields = _state().fields(5, mrv2=True)
    assert fields["padded_num_tokens"] == 8 and fields["moe_comm_type"] is MoECommType.MC2
    assert fields["mmrs_fusion"] is False  # MoE model on MRV2
    assert fields["mc2_mask"].tolist() == [True] * 5 + [False] * 3
    assert "padded_length" not in fields  # only with DP > 1
    assert _state(dp=2).fields(5, num_tokens_across_dp=torch.tensor([5, 9]),
                               mrv2=True)["padded_length"] == 12
    assert _state(moe=False).fields(3, mrv2=True)["mmrs_fusion"] is True
    with fc.override_mrv2_in_profile_run(True):
        assert _state().fields(1, mrv2=True)["in_profile_run"] is True
    assert fc.get_mrv2_in_profile_run() is False


def test_mrv1_fields() -> None:
    model = types.SimpleNamespace(model=types.SimpleNamespace(start_layer=3))
    fields = _state(tp=16).fields(5, model_instance=model, in_profile_run=True)
    assert fields["layer_idx"] == 3 and fields["is_first_layer"] is True
    assert fields["mmrs_fusion"] is False  # TP > 8 on MRV1
    assert fields["in_profile_run"] is True and fields["padded_length"] == 16


def test_dp_max_decides_the_moe_method() -> None:
    state = _state(dp=2)
    fields = state.fields(5, num_tokens_across_dp=torch.tensor([5, 4097]))
    assert fields["max_tokens_across_dp"] == 4097 and fields["moe_comm_type"] is (
        MoECommType.ALLTOALL)


def test_set_ascend_forward_context_on_vllm(make_vllm_config) -> None:
    from vllm.forward_context import get_forward_context

    cfg = make_vllm_config(enforce_eager=True)
    state = fc.AscendForwardState.from_vllm_config(cfg, extract_facts(cfg, "cpu"))
    assert state.moe_inputs.is_moe is False and not state.budget.has_mask
    with fc.set_ascend_forward_context(None, cfg, num_tokens=7, state=state) as ctx:
        assert get_forward_context() is ctx
        assert ctx.moe_comm_type is None and ctx.num_tokens == 7
        extra = fc.ExtraForwardContext(use_mrv2=False)
        assert extra.padded_num_tokens == 7
        extra.capturing = True
        assert ctx.capturing is True
        with pytest.raises(AttributeError, match="not an Ascend forward-context field"):
            _ = extra.attn_metadata


def test_extra_context_on_mrv2() -> None:
    ctx = types.SimpleNamespace(additional_kwargs={"num_tokens": 3})
    extra = fc.ExtraForwardContext(use_mrv2=True, get_context=lambda: ctx)
    assert extra.num_tokens == 3 and extra.mc2_mask is None
    extra.sinks = True
    assert ctx.additional_kwargs["sinks"] is True


def test_platform_hook_returns_nothing_on_mrv1(make_vllm_config) -> None:
    from vllm_ascend.engine import engine_of

    cfg = make_vllm_config(enforce_eager=True)
    state = engine_of(cfg).forward
    assert fc.mrv2_additional_context(state, vllm_config=cfg, num_tokens=4) == {}
