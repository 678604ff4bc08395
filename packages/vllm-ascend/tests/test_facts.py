"""Deployment facts read from real VllmConfigs (dense and MoE tiny models)."""

from __future__ import annotations

import pytest
from vllm_ascend.engine.resolution import extract_facts, is_moe_config


def test_is_moe_config() -> None:
    assert is_moe_config({"num_experts": 8})
    assert is_moe_config({"text_config": {"n_routed_experts": 4}})
    assert not is_moe_config({"hidden_size": 8, "sub": {"heads": 2}})


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory):
    from transformers import Qwen3MoeConfig

    path = tmp_path_factory.mktemp("moe") / "qwen3moe"
    Qwen3MoeConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=8, num_experts_per_tok=2, max_position_embeddings=256,
        architectures=["Qwen3MoeForCausalLM"],
    ).save_pretrained(path)
    return path


def test_dense_facts(make_vllm_config) -> None:
    facts = extract_facts(make_vllm_config(enforce_eager=True), "cpu")
    assert (facts.soc, facts.model_type, facts.is_moe) == ("cpu", "qwen3", False)
    assert (facts.num_attention_heads, facts.num_key_value_heads, facts.head_dim) == (4, 2, 64)
    assert facts.architectures == ("Qwen3ForCausalLM",) and facts.dtype == "float32"
    assert facts.kv_role is None and facts.speculative_method is None


def test_moe_facts_and_forward_state(make_vllm_config, tiny_moe) -> None:
    from vllm_ascend.base.forward_context import AscendForwardState
    from vllm_ascend.distributed.moe_comm import MoECommType

    cfg = make_vllm_config(model=str(tiny_moe), enforce_eager=True, skip_tokenizer_init=True)
    facts = extract_facts(cfg, "cpu")
    assert facts.is_moe and facts.num_experts == 8 and facts.num_experts_per_tok == 2
    assert facts.moe_intermediate_size == 64
    state = AscendForwardState.from_vllm_config(cfg, extract_facts(cfg, "cpu"))
    assert state.budget.has_mask
    fields = state.fields(5)
    assert fields["moe_comm_type"] is MoECommType.ALLGATHER  # EP off
    assert fields["mc2_mask"].tolist() == [True] * 5


def test_scheduler_and_dp_facts(make_vllm_config) -> None:
    plain = extract_facts(make_vllm_config(enforce_eager=True), "A2")
    assert (plain.scheduler_policy, plain.nnodes_within_dp, plain.sequence_parallel,
            plain.enable_eplb) == ("fcfs", 1, False, False)
    cfg = make_vllm_config(enforce_eager=True, scheduling_policy="priority")
    cfg.parallel_config.nnodes = 2  # one DP replica (DP 1) over two nodes
    facts = extract_facts(cfg, "A2")
    assert (facts.scheduler_policy, facts.nnodes_within_dp) == ("priority", 2)


def test_short_request_first_needs_fcfs_on_a_real_config(make_vllm_config) -> None:
    import ascend_config

    srf = {"scheduler_config": {"short_request_first_config": {"enabled": True}}}
    with pytest.raises((ascend_config.AscendConfigError, ValueError)) as info:
        make_vllm_config(enforce_eager=True, scheduling_policy="priority", additional_config=srf)
    assert "vLLM's scheduling policy is 'priority'" in str(info.value)
    cfg = make_vllm_config(enforce_eager=True, additional_config=srf)
    assert cfg.scheduler_config.policy == "fcfs"


def test_dyntra_lb_needs_one_node_per_replica_on_a_real_config(make_vllm_config) -> None:
    import ascend_config

    kv = {"kv_connector": "ExampleConnector", "kv_role": "kv_consumer"}
    dyn = {"scheduler_config": {"dyntra_lb_config": {"enabled": True}}}
    ok = make_vllm_config(enforce_eager=True, data_parallel_size=2, kv_transfer_config=kv,
                          additional_config=dyn)
    assert extract_facts(ok, "cpu").nnodes_within_dp == 1
    with pytest.raises((ascend_config.AscendConfigError, ValueError)) as info:
        make_vllm_config(enforce_eager=True, data_parallel_size=2, data_parallel_size_local=2,
                         nnodes=2, kv_transfer_config=kv, additional_config=dyn)
    assert "a replica here spans 2 nodes" in str(info.value)


def test_sequence_parallel_with_pcp_rounds_the_token_budget(make_vllm_config, tiny_moe) -> None:
    import ascend_config
    from vllm_ascend.config_pipeline.memory import apply_derived_edits

    cfg = make_vllm_config(model=str(tiny_moe), enforce_eager=True, skip_tokenizer_init=True,
                           tensor_parallel_size=2, data_parallel_size=2,
                           enable_expert_parallel=True, all2all_backend="allgather_reducescatter",
                           max_num_batched_tokens=1001)
    assert extract_facts(cfg, "A2").sequence_parallel is True
    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    # Without prefill context parallel the budget stays as the user set it.
    assert apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2")) == []
    assert cfg.scheduler_config.max_num_batched_tokens == 1001
    # vLLM builds PCP > 1 only for model runner v2; set it on the built config.
    cfg.parallel_config.prefill_context_parallel_size = 2
    notes = apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.scheduler_config.max_num_batched_tokens == 1004  # multiple of TP 2 x PCP 2
    assert "TP x PCP = 4" in notes[-1]
    assert apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2")) == []
