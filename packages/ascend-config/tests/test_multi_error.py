"""Independent mistakes come back together in one error, one line each."""

from __future__ import annotations

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, resolve


def test_three_independent_mistakes_one_error() -> None:
    config = {
        "rejection_sampler_config": {"posterior_threshold": 1.5},       # range
        "scheduler_config": {"dyntra_lb_config": {"enabled": "yes"}},  # type
        "enable_mc2_hierarchy_comm": True,                              # deployment rule (A5)
    }
    with pytest.raises(AscendConfigError) as info:
        resolve(config, DeploymentFacts(soc="A5"), {})
    err = info.value
    assert [p.path for p in err.problems] == [
        "scheduler_config.dyntra_lb_config.enabled",
        "rejection_sampler_config.posterior_threshold",
        "enable_mc2_hierarchy_comm",
    ]
    lines = str(err).splitlines()
    assert lines[0] == "3 problems in the Ascend configuration:"
    assert lines[1:] == err.lines()
    assert "given 1.5" in lines[2] and "<= 1" in lines[2]
    assert "given 'yes'" in lines[1] and "true or false" in lines[1]
    assert "A5" in lines[3]
    assert isinstance(err, ValueError)


def test_rules_still_run_next_to_schema_errors() -> None:
    # The bad threshold is dropped to its default so the kv_nz rule still reports.
    with pytest.raises(AscendConfigError) as info:
        resolve({"scheduler_config": {"short_request_first_config": {"threshold": "x"}},
                 "enable_kv_nz": True, "mega_moe_max_tokens": 0}, environ={})
    assert [p.path for p in info.value.problems] == [
        "scheduler_config.short_request_first_config.threshold", "mega_moe_max_tokens",
        "enable_kv_nz", "enable_kv_nz"]


def test_problem_objects_carry_path_value_allowed_message() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({"weight_nz_mode": 9}, environ={})
    [p] = info.value.problems
    assert (p.path, p.value, p.allowed) == ("weight_nz_mode", "9", "0, 1 or 2")
    assert p.message
