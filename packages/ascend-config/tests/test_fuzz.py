"""Random JSON into resolve: only AscendConfigError escapes; each problem is one short line."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, resolve
from ascend_config.schema.introspect import all_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KNOWN = sorted({p.split(".")[-1] for p in all_paths()})
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, -1, 10**40, 512, 513]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1.0, 1e308]),
    st.text(max_size=30),
    st.sampled_from(["all", "dspark", "dynamic", "true", "1", "x.json", "\n\u2028\x00"]),
)
KEYS = st.one_of(st.sampled_from(KNOWN), st.text(min_size=0, max_size=20), st.integers(-2, 2))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=30,
)
SECTIONS = st.sampled_from([p for p in all_paths() if "." not in p])
CONFIG = st.one_of(
    JSON,
    st.dictionaries(st.one_of(SECTIONS, KEYS), JSON, max_size=8),
    st.dictionaries(SECTIONS, st.dictionaries(st.sampled_from(KNOWN), SCALARS, max_size=6),
                    max_size=6),
)
FACTS = st.builds(
    DeploymentFacts,
    soc=st.sampled_from(["A2", "A3", "A5", "310P", "cpu"]),
    tensor_parallel_size=st.integers(1, 16), data_parallel_size=st.integers(1, 16),
    pipeline_parallel_size=st.integers(1, 2), is_moe=st.booleans(), use_mla=st.booleans(),
    index_topk=st.one_of(st.none(), st.integers(1, 8192)),
    kv_role=st.sampled_from([None, "kv_producer", "kv_consumer", "kv_both"]),
    num_key_value_heads=st.integers(0, 64), enforce_eager=st.booleans(),
    kv_connector_extra_config=st.dictionaries(
        st.sampled_from(["prefill", "decode", "connectors"]), JSON, max_size=2),
)
ENV = st.dictionaries(
    st.sampled_from(["VLLM_ASCEND_ENABLE_NZ", "DYNAMIC_EPLB", "VLLM_BATCH_INVARIANT",
                     "VLLM_ASCEND_BALANCE_SCHEDULING", "PYTORCH_NPU_ALLOC_CONF",
                     "VLLM_ASCEND_ENABLE_FUSED_MC2"]),
    st.text(max_size=12), max_size=3)


def _deep(depth: int) -> Any:
    value: Any = {"enabled": True}
    for _ in range(depth):
        value = {"method_params": value, "x": [value]}
    return value


# Fewer examples under the mutation runner (see test_fuzz_inputs.py).
@settings(max_examples=200 // (10 if "MUTANT_UNDER_TEST" in os.environ else 1), deadline=None,
          derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIG, facts=FACTS, env=ENV)
def test_only_ascend_config_error_escapes(config: Any, facts: DeploymentFacts,
                                          env: dict[str, str]) -> None:
    try:
        cfg = resolve(config, facts, env)
    except AscendConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            line = problem.line()
            assert len(line) <= 300 and "\n" not in line and line.isprintable()
        assert len(str(exc).splitlines()) == len(exc.problems) + 1
    else:
        assert type(cfg).from_json(cfg.to_json()) == cfg


def test_deep_nesting_and_huge_values() -> None:
    config = {"dynamic_spec_config": {"method_params": _deep(60)},
              "dump_config": _deep(60), "mega_moe_max_tokens": 10**400,
              "scheduler_config": _deep(30), "ü" * 400: "λ" * 5000}
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={})
    # Too deep to validate: the first over-deep key found (the walk takes the last key
    # first) is the one problem; nothing else is run.
    [problem] = info.value.problems
    assert (problem.path, problem.message) == ("scheduler_config",
                                               "nested deeper than 32 levels")
    assert len(problem.line()) <= 300


def test_huge_integer_and_long_key_within_limits() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({"mega_moe_max_tokens": 10**400, "ü" * 400: "λ" * 5000}, environ={})
    [unknown] = info.value.problems
    assert unknown.message == "unknown key" and len(unknown.line()) <= 300
    cfg = resolve({"mega_moe_max_tokens": 10**400}, environ={})
    assert cfg.mega_moe_max_tokens == 10**400
    assert type(cfg).from_json(cfg.to_json()) == cfg
