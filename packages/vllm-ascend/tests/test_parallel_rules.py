"""Parallel-layout rules of the NPU pipeline (reference 4.4), all problems at once."""

from __future__ import annotations

import pytest
from ascend_config import DeploymentFacts
from vllm_ascend.config_pipeline.parallel_rules import (
    LayoutFacts,
    check_parallel_layout,
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
