"""Deployment facts read from real VllmConfigs (dense and MoE tiny models)."""

from __future__ import annotations

import pytest
from vllm_ascend.config_pipeline.facts import extract_facts, is_moe_config


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
    from vllm_ascend.forward_context import AscendForwardState
    from vllm_ascend.moe_comm import MoECommType

    cfg = make_vllm_config(model=str(tiny_moe), enforce_eager=True, skip_tokenizer_init=True)
    facts = extract_facts(cfg, "cpu")
    assert facts.is_moe and facts.num_experts == 8 and facts.num_experts_per_tok == 2
    assert facts.moe_intermediate_size == 64
    state = AscendForwardState.from_vllm_config(cfg, "cpu")
    assert state.budget.has_mask
    fields = state.fields(5)
    assert fields["moe_comm_type"] is MoECommType.ALLGATHER  # EP off
    assert fields["mc2_mask"].tolist() == [True] * 5
