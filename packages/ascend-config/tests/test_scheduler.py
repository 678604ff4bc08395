"""Scheduler section: legacy spellings, env fallback, policy combinations and PD placement."""

from __future__ import annotations

from typing import Any

import pytest

from .rule_outcomes import ok, outcome

S = "scheduler_config"


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [p for p, _ in found]


def test_legacy_top_level_recompute_with_null_nested(res: Any) -> None:
    cfg = res({"scheduler_config": None, "recompute_scheduler_enable": True},
              kv_role="kv_consumer")
    assert cfg.scheduler_config.recompute_scheduler_enable is True
    assert cfg.warnings == (
        "top-level 'recompute_scheduler_enable' is deprecated; use "
        "scheduler_config.recompute_scheduler_enable",)


def test_four_legacy_keys_four_warnings(res: Any) -> None:
    cfg = res({"enable_balance_scheduling": True,
               "short_request_first_config": {"enabled": True, "threshold": 64},
               "batch_job_sched_config": {"max_jobs": 3},
               "profiling_chunk_config": {"min_chunk": 1024}})
    sched = cfg.scheduler_config
    assert sched.enable_balance_scheduling is True
    assert (sched.short_request_first_config.threshold, sched.batch_job_sched_config.max_jobs,
            sched.profiling_chunk_config.min_chunk) == (64, 3, 1024)
    assert len(cfg.warnings) == 4 and all("deprecated; use scheduler_config." in w
                                          for w in cfg.warnings)


def test_nested_wins_over_legacy(res: Any) -> None:
    cfg = res({"scheduler_config": {"recompute_scheduler_enable": False,
                                    "batch_job_sched_config": {"max_jobs": 1}},
               "recompute_scheduler_enable": True, "batch_job_sched_config": {"max_jobs": 9},
               "short_request_first_config": {"threshold": 7}})
    sched = cfg.scheduler_config
    assert sched.recompute_scheduler_enable is False
    assert sched.batch_job_sched_config.max_jobs == 1
    assert sched.short_request_first_config.threshold == 7
    assert sorted(w.split("'")[1] for w in cfg.warnings) == [
        "batch_job_sched_config", "recompute_scheduler_enable", "short_request_first_config"]
    assert sum("deprecated and ignored" in w for w in cfg.warnings) == 2


def test_legacy_value_is_validated_too(problems: Any) -> None:
    assert paths(problems({"short_request_first_config": {"threshold": -1}})) == [
        "short_request_first_config.threshold"]


def test_scheduler_config_must_be_a_dict(problems: Any) -> None:
    [(path, line)] = problems({"scheduler_config": ["recompute_scheduler_enable"]})
    assert path == S and "must be a JSON object" in line and "given ['recompute" in line


@pytest.mark.parametrize(("env", "expected", "warned"), [
    ({}, False, False), ({"VLLM_ASCEND_BALANCE_SCHEDULING": "1"}, True, True),
    ({"VLLM_ASCEND_BALANCE_SCHEDULING": "0"}, False, True)])
def test_balance_scheduling_env_fallback(
    res: Any, env: dict[str, str], expected: bool, warned: bool
) -> None:
    cfg = res(None, env=env)
    assert cfg.scheduler_config.enable_balance_scheduling is expected
    assert bool(cfg.warnings) is warned


def test_balance_scheduling_key_beats_env(res: Any) -> None:
    cfg = res({S: {"enable_balance_scheduling": False}},
              env={"VLLM_ASCEND_BALANCE_SCHEDULING": "1"})
    assert cfg.scheduler_config.enable_balance_scheduling is False and cfg.warnings == ()


@pytest.mark.parametrize("role", ["kv_producer", "kv_consumer"])
def test_balance_scheduling_rejected_on_pd_roles(problems: Any, role: str) -> None:
    assert paths(problems({S: {"enable_balance_scheduling": True}}, kv_role=role)) == [
        f"{S}.enable_balance_scheduling"]


@pytest.mark.parametrize("role", [None, "kv_both"])
def test_balance_scheduling_accepted(res: Any, role: str | None) -> None:
    assert res({S: {"enable_balance_scheduling": True}}, kv_role=role
               ).scheduler_config.enable_balance_scheduling


SRF = {"short_request_first_config": {"enabled": True}}


@pytest.mark.parametrize(("extra", "role"), [
    ({"batch_job_sched_config": {"enabled": True}}, None),
    ({"profiling_chunk_config": {"enabled": True}}, None),
    ({}, "kv_consumer"),
])
def test_short_request_first_rejections(
    problems: Any, extra: dict[str, Any], role: str | None
) -> None:
    found = problems({S: {**SRF, **extra}}, kv_role=role, pipeline_parallel_size=2)
    assert f"{S}.short_request_first_config.enabled" in paths(found)


@pytest.mark.parametrize("role", [None, "kv_producer", "kv_both"])
def test_short_request_first_accepted(res: Any, role: str | None) -> None:
    assert res({S: SRF}, kv_role=role).scheduler_config.short_request_first_config.enabled


def test_short_request_first_needs_fcfs_policy(problems: Any, res: Any) -> None:
    found = problems({S: SRF}, scheduler_policy="priority")
    assert paths(found) == [f"{S}.short_request_first_config.enabled"]
    assert "true only with vLLM's scheduling policy fcfs" in found[0][1]
    assert "'priority'" in found[0][1]
    fcfs = res({S: SRF}, scheduler_policy="fcfs").scheduler_config
    assert fcfs.short_request_first_config.enabled
    # the policy alone is no problem while short-request-first is off
    off = res({}, scheduler_policy="priority").scheduler_config.short_request_first_config
    assert off.enabled is False


def test_short_request_first_reports_every_conflict_at_once(problems: Any) -> None:
    found = problems({S: {**SRF, "batch_job_sched_config": {"enabled": True}}},
                     kv_role="kv_consumer", scheduler_policy="priority")
    texts = " | ".join(line for _, line in found)
    assert len(found) == 3
    for needle in ("batch-job", "PD decode node", "fcfs"):
        assert needle in texts


DLB = {"dyntra_lb_config": {"enabled": True}}
D_NODE = {"kv_role": "kv_consumer", "data_parallel_size": 4}


def test_dyntra_lb_accepted_on_decode_node(res: Any) -> None:
    assert res({S: DLB}, **D_NODE).scheduler_config.dyntra_lb_config.enabled


@pytest.mark.parametrize(("sched", "facts"), [
    ({**DLB, "enable_balance_scheduling": True}, {"kv_role": "kv_both", "data_parallel_size": 4}),
    (DLB, {"kv_role": "kv_producer", "data_parallel_size": 4}),
    (DLB, {"data_parallel_size": 4}),
    (DLB, {"kv_role": "kv_consumer", "data_parallel_size": 1}),
    ({**DLB, "profiling_chunk_config": {"enabled": True}}, {**D_NODE, "pipeline_parallel_size": 2}),
    (DLB, {**D_NODE, "nnodes_within_dp": 2}),
])
def test_dyntra_lb_rejections(problems: Any, sched: dict[str, Any], facts: dict[str, Any]) -> None:
    assert f"{S}.dyntra_lb_config.enabled" in paths(problems({S: sched}, **facts))


def test_dyntra_lb_needs_one_node_per_dp_replica(problems: Any, res: Any) -> None:
    found = problems({S: DLB}, **D_NODE, nnodes_within_dp=2)
    assert paths(found) == [f"{S}.dyntra_lb_config.enabled"]
    assert "nnodes_within_dp 1" in found[0][1] and "spans 2 nodes" in found[0][1]
    assert res({S: DLB}, **D_NODE, nnodes_within_dp=1).scheduler_config.dyntra_lb_config.enabled
    every = problems({S: DLB}, nnodes_within_dp=3)  # no kv role, DP 1, 3 nodes: three lines
    assert len(every) == 3


def test_recompute_scheduler_by_role(res: Any, problems: Any) -> None:
    on = {S: {"recompute_scheduler_enable": True}}
    assert res(on, kv_role="kv_consumer").scheduler_config.recompute_scheduler_enable
    cfg = res(on, kv_role="kv_producer")
    assert cfg.scheduler_config.recompute_scheduler_enable is False
    assert "disabled on this kv_producer node" in cfg.warnings[0]
    assert paths(problems(on)) == [f"{S}.recompute_scheduler_enable"]
    assert paths(problems(on, kv_role="kv_both")) == [f"{S}.recompute_scheduler_enable"]


PC = {"profiling_chunk_config": {"enabled": True}}


def test_profiling_chunk_needs_pp(problems: Any, res: Any) -> None:
    assert paths(problems({S: PC})) == [f"{S}.profiling_chunk_config.enabled"]
    chunk = res({S: PC}, pipeline_parallel_size=2).scheduler_config.profiling_chunk_config
    assert (chunk.enabled, chunk.need_timing, chunk.min_chunk) == (True, True, 4096)


def test_profiling_chunk_clamps_min_chunk(res: Any) -> None:
    cfg = res({S: PC}, pipeline_parallel_size=2, max_num_batched_tokens=2048)
    assert cfg.scheduler_config.profiling_chunk_config.min_chunk == 2048
    assert cfg.warnings == (
        "scheduler_config.profiling_chunk_config.min_chunk 4096 exceeds max_num_batched_tokens "
        "2048; it is clamped to 2048",)


def test_profiling_chunk_rejects_balance(problems: Any) -> None:
    found = problems({S: {**PC, "enable_balance_scheduling": True}}, pipeline_parallel_size=2)
    assert paths(found) == [f"{S}.profiling_chunk_config.enabled"]


def test_need_timing_forced_off_when_disabled(res: Any) -> None:
    cfg = res({S: {"profiling_chunk_config": {"need_timing": True}}})
    assert cfg.scheduler_config.profiling_chunk_config.need_timing is False
    assert len(cfg.warnings) == 1
    chunk = res({S: {"profiling_chunk_config": {"enabled": True, "need_timing": False}}},
                pipeline_parallel_size=2).scheduler_config.profiling_chunk_config
    assert chunk.need_timing is False


PC_TOP = {"scheduler_config": {"profiling_chunk_config": {"enabled": True, "min_chunk": 4096}}}


DL = {"scheduler_config": {"dyntra_lb_config": {"enabled": True}}}


DL_PATH = "scheduler_config.dyntra_lb_config.enabled"


@pytest.mark.parametrize(("tokens", "min_chunk", "warns"), [
    (4095, 4095, True), (4096, 4096, False), (4097, 4096, False)])
def test_profiling_chunk_clamp(tokens: int, min_chunk: int, warns: bool) -> None:
    cfg = ok(outcome(PC_TOP, pipeline_parallel_size=2, max_num_batched_tokens=tokens))
    assert cfg.scheduler_config.profiling_chunk_config.min_chunk == min_chunk
    assert len(cfg.warnings) == (1 if warns else 0)


@pytest.mark.parametrize(("pp", "allowed"), [(1, False), (2, True)])
def test_profiling_chunk_needs_pp_above_one(pp: int, allowed: bool) -> None:
    result = outcome(PC_TOP, pipeline_parallel_size=pp)
    path = "scheduler_config.profiling_chunk_config.enabled"
    assert (result == [path]) is not allowed


@pytest.mark.parametrize(("dp", "nnodes", "problems"), [
    (1, 1, 1), (2, 1, 0), (3, 1, 0), (2, 2, 1), (1, 2, 2)])
def test_dyntra_lb_dp_and_nodes(dp: int, nnodes: int, problems: int) -> None:
    result = outcome(DL, kv_role="kv_consumer", data_parallel_size=dp, nnodes_within_dp=nnodes)
    if problems:
        assert result == [DL_PATH] * problems
    else:
        assert ok(result).scheduler_config.dyntra_lb_config.enabled is True
