"""Parallel-layout and draft-model rules of the NPU pipeline, all problems at
once; pure facts first, then the same rules on real VllmConfigs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from ascend_config import DeploymentFacts
from vllm_ascend.config_pipeline.parallel_layout import (
    DraftFacts,
    LayoutFacts,
    check_parallel_layout,
    draft_problems,
    draft_tensor_parallel_size,
    layout_of,
    parallel_problems,
)


@pytest.mark.parametrize(
    ("facts", "layout", "needle"),
    [
        (DeploymentFacts(prefill_context_parallel_size=2), LayoutFacts(), "model runner v2"),
        (DeploymentFacts(index_topk=64, decode_context_parallel_size=2, tensor_parallel_size=4),
         LayoutFacts(), "equal to tensor_parallel_size=4"),
        (DeploymentFacts(soc="A5", index_topk=64, decode_context_parallel_size=2,
                         tensor_parallel_size=2), LayoutFacts(), "not implemented on A5"),
        (DeploymentFacts(kv_connector="X", decode_context_parallel_size=2, block_size=128),
         LayoutFacts(cp_kv_cache_interleave_size=1), "cp_kv_cache_interleave_size=1"),
        (DeploymentFacts(), LayoutFacts(sequence_parallel_moe=True), "tensor_parallel_size > 1"),
        (DeploymentFacts(tensor_parallel_size=2, is_moe=True),
         LayoutFacts(sequence_parallel_moe=True), "enable_expert_parallel"),
        (DeploymentFacts(kv_role="kv_producer", tensor_parallel_size=2),
         LayoutFacts(kv_extra_config={"prefill": {"tp_size": 4}}), "prefill.tp_size=4"),
        (DeploymentFacts(kv_role="kv_consumer", data_parallel_size=2),
         LayoutFacts(kv_extra_config={"decode": {"dp_size": 1}}), "decode.dp_size=1"),
    ],
)
def test_each_rule(facts, layout, needle) -> None:
    problems = parallel_problems(facts, layout)
    assert len(problems) == 1 and needle in problems[0]


@pytest.mark.parametrize(
    ("facts", "layout"),
    [(DeploymentFacts(), LayoutFacts()),
     (DeploymentFacts(prefill_context_parallel_size=2), LayoutFacts(use_mrv2=True)),
     (DeploymentFacts(index_topk=64, decode_context_parallel_size=2, tensor_parallel_size=2),
      LayoutFacts()),
     (DeploymentFacts(kv_connector="X", decode_context_parallel_size=2, block_size=128),
      LayoutFacts(cp_kv_cache_interleave_size=128)),
     (DeploymentFacts(kv_role="kv_consumer", tensor_parallel_size=2),
      LayoutFacts(kv_extra_config={"prefill": {"tp_size": 4}}))],
)
def test_valid_layouts(facts, layout) -> None:
    assert parallel_problems(facts, layout) == []


def test_all_problems_in_one_error() -> None:
    facts = DeploymentFacts(prefill_context_parallel_size=2, kv_role="kv_both",
                            tensor_parallel_size=2)
    layout = LayoutFacts(sequence_parallel_moe=False,
                         kv_extra_config={"prefill": {"tp_size": 8}, "decode": {"dp_size": 3}})
    with pytest.raises(ValueError) as info:
        check_parallel_layout(facts, layout)
    assert str(info.value).count("\n  ") == 3


def test_layout_of_a_real_config(make_vllm_config) -> None:
    layout = layout_of(make_vllm_config(enforce_eager=True))
    assert layout.kv_extra_config == {} and layout.sequence_parallel_moe is False
    assert layout.npus_needed is None and layout.npus_visible is None  # not counted


@pytest.mark.parametrize(("needed", "visible", "refused"),
                         [(2, 1, True), (2, 2, False), (8, 7, True), (1, 0, True), (1, 8, False),
                          (None, 1, False), (4, None, False)])
def test_ranks_on_this_host_must_fit_its_visible_npus(needed: int | None, visible: int | None,
                                                      refused: bool) -> None:
    layout = LayoutFacts(npus_needed=needed, npus_visible=visible, visible_devices="0")
    problems = parallel_problems(DeploymentFacts(), layout)
    assert problems == ([f"this host's ranks (tensor x pipeline x context parallel x local "
                         f"data parallel sizes) need {needed} NPUs but {visible} are visible "
                         "(ASCEND_RT_VISIBLE_DEVICES='0'); lower the parallel sizes or make "
                         "more NPUs visible"] if refused else [])


@pytest.mark.parametrize(("kwargs", "needed"), [
    ({}, 1),
    ({"tensor_parallel_size": 2, "distributed_executor_backend": "mp"}, 2),
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2,
      "distributed_executor_backend": "mp"}, 4),
    ({"tensor_parallel_size": 2, "data_parallel_size": 2, "distributed_executor_backend": "mp"},
     4),
])
def test_npus_needed_of_a_real_config(make_vllm_config, kwargs: dict[str, object],
                                      needed: int) -> None:
    layout = layout_of(make_vllm_config(enforce_eager=True, **kwargs), npus_visible=64)
    assert layout.npus_needed == needed


# --- draft model under decode context parallel --------------------------------------------

GQA_DRAFT = DraftFacts(has_model=True, tensor_parallel_size=8, num_attention_heads=16,
                       num_key_value_heads=2)


@pytest.mark.parametrize(
    ("dcp", "draft", "needles"),
    [(2, DraftFacts(per_batch_size_schedule=True), ["num_speculative_tokens_per_batch_size"]),
     (2, replace(GQA_DRAFT, tensor_parallel_size=2), ["(2) to be greater than its 2 KV heads"]),
     (8, GQA_DRAFT, ["exceeds draft TP 8 // 2 KV heads = 4; allowed: at most 4"]),
     (4, replace(GQA_DRAFT, num_attention_heads=12), ["(12 // 2 = 6) must be divisible by "
                                                      "decode_context_parallel_size=4"]),
     (2, replace(GQA_DRAFT, tensor_parallel_size=1, num_attention_heads=6, num_key_value_heads=2,
                 per_batch_size_schedule=True),
      ["num_speculative_tokens_per_batch_size", "greater than its 2 KV heads",
       "(6 // 2 = 3) must be divisible"])],
)
def test_each_draft_rule(dcp, draft, needles) -> None:
    problems = draft_problems(dcp, draft)
    assert len(problems) == len(needles)
    for problem, needle in zip(problems, needles, strict=True):
        assert needle in problem


@pytest.mark.parametrize(
    ("dcp", "draft"),
    [(2, None), (1, replace(GQA_DRAFT, tensor_parallel_size=1, per_batch_size_schedule=True)),
     (2, GQA_DRAFT), (4, GQA_DRAFT),
     (2, replace(GQA_DRAFT, use_mla=True, tensor_parallel_size=1, num_key_value_heads=1,
                 num_attention_heads=3)),  # MLA drafts are skipped
     (2, DraftFacts())],  # ngram / suffix: no draft attention to split
)
def test_valid_drafts(dcp, draft) -> None:
    assert draft_problems(dcp, draft) == []


def test_draft_mla_still_rejects_a_per_batch_schedule() -> None:
    mla = DraftFacts(per_batch_size_schedule=True, has_model=True, use_mla=True)
    assert len(draft_problems(2, mla)) == 1


def test_draft_tensor_parallel_fallback_order() -> None:
    assert draft_tensor_parallel_size(2, 4, 8) == 2  # the draft's parallel config first
    assert draft_tensor_parallel_size(None, 4, 8) == 4  # then draft_tensor_parallel_size
    assert draft_tensor_parallel_size(None, None, 8) == 8  # then the target's TP


def test_draft_problems_join_the_layout_error() -> None:
    facts = DeploymentFacts(decode_context_parallel_size=2, tensor_parallel_size=4,
                            prefill_context_parallel_size=2)
    layout = LayoutFacts(draft=replace(GQA_DRAFT, tensor_parallel_size=1))
    with pytest.raises(ValueError) as info:
        check_parallel_layout(facts, layout)
    text = str(info.value)
    assert "draft model's tensor parallel size (1)" in text and "model runner v2" in text


def _spec(draft, **extra):
    return {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2, **extra}


@pytest.mark.parametrize(("draft_tp", "expected"), [(None, []), (4, []), (1, ["(1)"])])
def test_draft_rules_on_real_configs(make_vllm_config, tiny_qwen3, draft_tp, expected) -> None:
    from vllm_ascend.engine.resolution import extract_facts

    extra = {} if draft_tp is None else {"draft_tensor_parallel_size": draft_tp}
    cfg = make_vllm_config(enforce_eager=True, tensor_parallel_size=4,
                           decode_context_parallel_size=2,
                           speculative_config=_spec(tiny_qwen3, **extra))
    layout = layout_of(cfg)
    assert layout.draft == DraftFacts(has_model=True, tensor_parallel_size=draft_tp or 4,
                                      num_attention_heads=4, num_key_value_heads=2)
    problems = parallel_problems(extract_facts(cfg, "A2"), layout)
    assert len(problems) == len(expected)
    for problem, needle in zip(problems, expected, strict=True):
        assert needle in problem and "greater than its 2 KV heads" in problem


def test_draft_per_batch_schedule_on_a_real_config(make_vllm_config, tiny_qwen3) -> None:
    from vllm_ascend.engine.resolution import extract_facts

    cfg = make_vllm_config(enforce_eager=True, tensor_parallel_size=4,
                           decode_context_parallel_size=2, speculative_config=_spec(
                               tiny_qwen3, num_speculative_tokens_per_batch_size=[(1, 8, 2)]))
    problems = parallel_problems(extract_facts(cfg, "A2"), layout_of(cfg))
    assert len(problems) == 1 and "num_speculative_tokens_per_batch_size" in problems[0]
    no_dcp = make_vllm_config(enforce_eager=True, tensor_parallel_size=4, speculative_config=_spec(
        tiny_qwen3, num_speculative_tokens_per_batch_size=[(1, 8, 2)]))
    assert parallel_problems(extract_facts(no_dcp, "A2"), layout_of(no_dcp)) == []


# --- kv load failure policy and vLLM's EPLB -------------------------------------------------

def test_recompute_on_kv_load_failure_rejected_for_hybrid_models() -> None:
    bad = LayoutFacts(kv_load_failure_policy="recompute", is_hybrid=True)
    problems = parallel_problems(DeploymentFacts(), bad)
    assert len(problems) == 1 and "kv_load_failure_policy='recompute'" in problems[0]
    assert "use 'fail'" in problems[0]
    assert parallel_problems(DeploymentFacts(), replace(bad, is_hybrid=False)) == []
    assert parallel_problems(DeploymentFacts(), replace(bad, kv_load_failure_policy="fail")) == []


def test_kv_load_failure_policy_read_from_a_real_config(make_vllm_config) -> None:
    kv = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
          "kv_load_failure_policy": "recompute"}
    layout = layout_of(make_vllm_config(enforce_eager=True, kv_transfer_config=kv))
    assert (layout.kv_load_failure_policy, layout.is_hybrid) == ("recompute", False)


EPLB_ON = DeploymentFacts(enable_eplb=True)


@pytest.mark.parametrize(
    ("facts", "layout", "needles"),
    [(EPLB_ON, LayoutFacts(use_mrv2=True, eplb_use_async=True), ["use_async"]),
     (EPLB_ON, LayoutFacts(use_mrv2=True, eplb_communicator="nixl"),
      ["communicator='nixl'", "[None, 'torch_nccl', 'torch_gloo']"]),
     (EPLB_ON, LayoutFacts(use_mrv2=True, eplb_communicator="torch_gloo"), []),
     (DeploymentFacts(), LayoutFacts(use_mrv2=True, eplb_use_async=True), []),
     (EPLB_ON, LayoutFacts(use_mrv2=False, eplb_use_async=True), [])],
)
def test_vllm_eplb_limits_on_model_runner_v2(facts, layout, needles) -> None:
    problems = parallel_problems(facts, layout)
    assert len(problems) == (1 if needles else 0)
    for needle in needles:
        assert needle in problems[0]
