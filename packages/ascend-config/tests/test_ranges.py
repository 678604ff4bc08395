"""The schema sections: every range and rejection of the existing plugin's ``additional_config``
keys and sub-configs, at and around the boundaries.
"""

from __future__ import annotations

from typing import Any

import pytest

from .rule_outcomes import lines

SR = "scheduler_config.short_request_first_config"
PC = "scheduler_config.profiling_chunk_config"
BJ = "scheduler_config.batch_job_sched_config"
DL = "scheduler_config.dyntra_lb_config"
RS = "rejection_sampler_config"


def _nest(path: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


def _get(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


# (dotted key, accepted values, rejected values)
RANGES: list[tuple[str, list[Any], list[Any]]] = [
    (f"{RS}.posterior_threshold", [1, 1.0, 0.5, 1e-9], [0, 0.0, -0.1, 1.0001, "0.5", True]),
    (f"{RS}.posterior_alpha", [0, 0.0, 3.5], [-0.01, "1", None]),
    (f"{RS}.enable_block_verify", [True, False], [1, "true", None]),
    (f"{RS}.enable_entropy_verify", [True], [0]),
    ("weight_nz_mode", [0, 1, 2], [-1, 3, True, 1.0, "1"]),
    ("enable_fused_mc2", [0, 1], [2, -1, True, "1"]),
    ("mega_moe_max_tokens", [1, 131072, 10**12], [0, -5, 1.5, "100", None]),
    (f"{SR}.threshold", [0, 256], [-1, 2.5]),
    (f"{SR}.long_max_wait_ms", [0, 0.0, 12.5], [-0.5, "1"]),
    (f"{PC}.smooth_factor", [1, 0.01], [0, 1.5, -1]),
    (f"{PC}.min_chunk", [1, 4096], [0, -1]),
    (f"{PC}.max_fit_chunk", [6, 30], [5, 0, -3]),
    (f"{BJ}.max_jobs", [0, 20], [-1]),
    (f"{BJ}.reserve_margin_blocks", [0, 2], [-1]),
    (f"{BJ}.reserve_max_blocks", [1, 8], [0]),
    (f"{BJ}.low_available_tokens_threshold", [1], [0]),
    (f"{BJ}.short_decode_token_threshold", [1], [0]),
    (f"{DL}.enabled", [False], ["yes", 1]),
    (f"{DL}.enable_diagnostics", [True], [0]),
    (f"{DL}.mode", ["static", "dynamic"], ["auto", "", 1]),
    (f"{DL}.start_step", [0, 100], [-1, 1.5]),
    (f"{DL}.end_step", [-1, 251, 10**6], [250, 0, -2, 100, 2.5]),
    (f"{DL}.bubble_threshold", [0.1, 5, 5.0], [0, -1.0, True, "5"]),
    (f"{DL}.long_req_block_threshold", [1], [0, -700]),
    (f"{DL}.dynamic_max_step", [1], [0]),
    ("eplb_config.expert_heat_collection_interval", [0, 600], [-1, "600", 1.0]),
    ("eplb_config.algorithm_execution_interval", [0, 50], [-1, None]),
    ("eplb_config.num_redundant_experts", [0, 16], [-1, 1.5]),
    ("eplb_config.eplb_policy_type", [0, 1, 2, 3], [4, -1, True, 2.0, "2"]),
    ("eplb_config.eplb_heat_collection_stage", ["all", "prefill", "decode"], ["both", None]),
    ("eplb_config.expert_map_record_path", [None], ["map.txt", "map", 3]),
    ("dynamic_spec_config.method", [None, "dspark", "dflash"], ["eagle", 1]),
    ("dynamic_spec_config.method_params", [{}, {"k": [1, 2]}], [[], "x", None]),
    ("finegrained_tp_config.mlp_tensor_parallel_size", [0], [-1, "2"]),
    ("cpu_binding_config.min_cpus_per_npu", [None, 3, 4, 5, 1023, 1024],
     [2, 0, 1025, "5", 5.0, True]),
    ("cpu_binding_config.bind_irq", [False], ["no"]),
    ("cpu_binding_config.migrate_memory", [True, False], [None]),
    ("sparse_kv_offload_config.topk_buffer_size", [1, 4096], [0, -1]),
    ("sparse_kv_offload_config.dram_size_per_dp_GB", [1], [0]),
    ("dump_config_path", [None, "/tmp/dump.json"], [1, {"a": 1}]),
    ("dump_config", [None, {"task": "statistics"}], ["cfg.json", [1]]),
    ("ascend_log_path", ["/var/log/x"], [None, 3]),
    ("pa_shape_list", [[], [1, 2, 4]], [[1.5], "1,2", [True]]),
    ("draft_window_size", [None, 1, 8], [0, -1, "4"]),
    ("enable_prefill_mc2", [True], [1]),
    ("ascend_compilation_config.fuse_kv_cache_attention", [True, False], ["yes", 1, None]),
    ("ascend_compilation_config.forbid_compile_after_ready", [True, False],
     ["strict", 1, 0, None]),
    ("rl_config.enabled", [False], ["true", 1, None]),
    ("rl_config.enable_batch_invariant", [False], [0]),
]

ACCEPT = [(k, v) for k, ok, _ in RANGES for v in ok]
REJECT = [(k, v) for k, _, bad in RANGES for v in bad]


@pytest.mark.parametrize(("key", "value"), ACCEPT, ids=[f"{k}={v!r}" for k, v in ACCEPT])
def test_accepted(res: Any, key: str, value: Any) -> None:
    cfg = res(_nest(key, value))
    got = _get(cfg, key)
    expected = tuple(value) if isinstance(value, list) else value
    assert got == expected


@pytest.mark.parametrize(("key", "value"), REJECT, ids=[f"{k}={v!r}" for k, v in REJECT])
def test_rejected(problems: Any, key: str, value: Any) -> None:
    found = problems(_nest(key, value))
    assert len(found) == 1
    path, line = found[0]
    # A bad list item is reported at its index (pa_shape_list[0]).
    assert path == key or path.startswith(f"{key}[")
    assert line.startswith(f"{path}: ") and "allowed:" in line and "given" in line


def test_posterior_threshold_line_names_value_and_range(problems: Any) -> None:
    [(_, line)] = problems({RS: {"posterior_threshold": 0}})
    assert line == (f"{RS}.posterior_threshold: Input should be greater than 0 "
                    "(given 0; allowed: a number > 0 and <= 1)")


def test_end_step_line(problems: Any) -> None:
    [(_, line)] = problems({"scheduler_config": {"dyntra_lb_config": {
        "start_step": 10, "end_step": 10}}})
    assert line == (f"{DL}.end_step: must be -1 or greater than start_step (10) "
                    "(given 10; allowed: -1 or an integer > start_step)")


DYNTRA_INVALID = [
    {"enabled": "true"}, {"enable_diagnostics": 1}, {"mode": "greedy"}, {"start_step": -1},
    {"end_step": 0}, {"start_step": 300, "end_step": 299}, {"bubble_threshold": 0},
    {"bubble_threshold": False}, {"long_req_block_threshold": 0}, {"dynamic_max_step": -1},
]


@pytest.mark.parametrize("section", DYNTRA_INVALID)
def test_ten_invalid_dyntra_configs(problems: Any, section: dict[str, Any]) -> None:
    found = problems({"scheduler_config": {"dyntra_lb_config": section}})
    assert len(found) == 1 and found[0][0].startswith(DL + ".")


@pytest.mark.parametrize("section", ["eplb_config", "rl_config", SR, PC, BJ, DL, "scheduler_config",
                                     "ascend_compilation_config", "xlite_graph_config"])
def test_section_must_be_an_object(problems: Any, section: str) -> None:
    [(path, line)] = problems(_nest(section, [1, 2]))
    assert path == section and "must be a JSON object" in line


@pytest.mark.parametrize(("config", "path", "guess"), [
    ({"eplb_confg": {}}, "eplb_confg", "eplb_config"),
    ({"dynamic_eplb": True}, "dynamic_eplb", "eplb_config.dynamic_eplb"),
    ({"rl_config": {"refresh": True}}, "rl_config.refresh", "refresh"),
    ({"ascend_compilation_config": {"fuse_norm_qaunt": False}},
     "ascend_compilation_config.fuse_norm_qaunt", "fuse_norm_quant"),
    ({"ascend_fusion_config": {"fusion_ops_gmm": True}},
     "ascend_fusion_config.fusion_ops_gmm", "fusion_ops_gmmswigluquant"),
    ({"scheduler_config": {"dyntra_lb_config": {"end": 1}}}, f"{DL}.end", None),
])
def test_unknown_keys_are_errors_with_did_you_mean(
    problems: Any, config: dict[str, Any], path: str, guess: str | None
) -> None:
    [(got, line)] = problems(config)
    assert got == path and "unknown key" in line
    if guess:
        assert f"did you mean '{guess}'?" in line


def test_retired_key_names_replacement(problems: Any) -> None:
    [(path, line)] = problems({"enable_sleep_mode_extra_cleanup": True})
    assert path == "enable_sleep_mode_extra_cleanup"
    assert "rl_config.sleep_mode_extra_cleanup" in line


def test_dump_config_and_path_are_exclusive(problems: Any) -> None:
    [(path, line)] = problems({"dump_config": {"a": 1}, "dump_config_path": "/tmp/x.json"})
    assert path == "dump_config_path" and "mutually exclusive" in line


def test_additional_config_must_be_a_mapping(problems: Any) -> None:
    [(path, line)] = problems([1, 2])  # type: ignore[arg-type]
    assert path == "<additional_config>" and "a JSON object" in line


def test_expert_map_path_must_be_readable_json(problems: Any, tmp_path: Any) -> None:
    good = tmp_path / "map.json"
    good.write_text("{}")
    assert [p for p, _ in problems({"eplb_config": {"expert_map_path": str(tmp_path / "x.json")}})
            ] == ["eplb_config.expert_map_path"]
    assert [p for p, _ in problems({"eplb_config": {"expert_map_path": "map.txt"}})] == [
        "eplb_config.expert_map_path"]


def test_readable_expert_map_is_accepted(res: Any, tmp_path: Any) -> None:
    good = tmp_path / "map.json"
    good.write_text("{}")
    assert res({"eplb_config": {"expert_map_path": str(good)}}).eplb_config.expert_map_path == str(
        good)


@pytest.mark.parametrize("value", [{"a": float("nan")}, {"a": [float("inf")]}, {"a": {1, 2}},
                                   {"a": b"x"}, _nest(".".join(["k"] * 40), 1)])
@pytest.mark.parametrize("key", ["dump_config", "dynamic_spec_config.method_params"])
def test_free_form_objects_must_be_plain_json(problems: Any, key: str, value: Any) -> None:
    [(path, _)] = problems(_nest(key, value))
    assert path == key


def test_expert_map_path_that_is_a_directory_is_refused(tmp_path: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "map.json").mkdir()  # readable, but no file
    assert lines({"eplb_config": {"expert_map_path": "map.json"}}) == [
        "eplb_config.expert_map_path: file not found or not readable (given 'map.json'; "
        "allowed: a readable .json file)"]
