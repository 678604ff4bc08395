"""The parallelism rules (fine-grained TP, MC2 and MegaMoE, shared experts, reduce-sample, EPLB,
CPU binding), each at, just below and just above its limit.

Expected values are the existing vllm-ascend plugin's rules, worked out by hand in each table
row; none is read back from the code.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, resolve

from .rule_outcomes import lines, ok, outcome


def test_dotted_eplb_key_is_named_whole_on_model_runner_v2() -> None:
    assert lines({"eplb_config": {"x.y": 1}}, use_model_runner_v2=True) == [
        "eplb_config.'x.y': unknown key (given 1; allowed: a key listed by `ascend-config "
        "explain`)",
        "eplb_config: model runner v2 uses vLLM's --enable-eplb; legacy EPLB fields given "
        "(given 'x.y'; allowed: only load_collection_phase)"]


HIER = "enable_mc2_hierarchy_comm"


DYN = {"DYNAMIC_EPLB": "true"}


FIT = {"megamoe_available": True, "hidden_size": 4096, "moe_intermediate_size": 2048}


FTP = "finegrained_tp_config"


MOE4 = {"is_moe": True, "data_parallel_size": 4}


D_NODE = {"kv_role": "kv_consumer", **MOE4}


RECOMPUTE = {"scheduler_config": {"recompute_scheduler_enable": True}}


@pytest.mark.parametrize(("experts", "redundant", "dynamic", "allowed"), [
    (511, 0, False, True), (512, 0, False, True), (513, 0, False, False),
    (480, 31, True, True), (480, 32, True, True), (480, 33, True, False),
    (480, 33, False, True), (512, 1, False, True), (512, 1, True, False),
])
@pytest.mark.parametrize("soc", ["A2", "A3"])
def test_hierarchy_expert_limit(soc: str, experts: int, redundant: int, dynamic: bool,
                                allowed: bool) -> None:
    eplb = {"dynamic_eplb": dynamic, "num_redundant_experts": redundant}
    result = outcome({HIER: True, "eplb_config": eplb}, DYN, soc=soc, num_experts=experts)
    if allowed:
        assert ok(result).enable_mc2_hierarchy_comm is True
    else:
        assert result == [HIER]


def test_hierarchy_message_breakdown() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({HIER: True}, DeploymentFacts(soc="A2", num_experts=513), {})
    assert "supports at most 512 experts, got 513 experts" in info.value.problems[0].line()


@pytest.mark.parametrize(("hidden", "fits"), [
    (512, False), (1023, False), (1024, True), (1536, True), (1280, False), (8191, False),
    (8192, True), (8704, False), (0, False),
])
def test_megamoe_hidden_size(hidden: int, fits: bool) -> None:
    cfg = ok(outcome({"enable_fused_mc2": 1}, **{**FIT, "hidden_size": hidden}))
    assert cfg.enable_fused_mc2 == (1 if fits else 0)
    assert len(cfg.warnings) == (0 if fits else 1)


@pytest.mark.parametrize(("inter", "fits"), [
    (512, False), (1023, False), (1024, True), (2560, True), (1100, False), (3071, False),
    (3072, True), (3584, False),
])
def test_megamoe_intermediate_size(inter: int, fits: bool) -> None:
    cfg = ok(outcome({"enable_fused_mc2": 1}, **{**FIT, "moe_intermediate_size": inter}))
    assert cfg.enable_fused_mc2 == (1 if fits else 0)


@pytest.mark.parametrize(("quant", "fits"), [
    (None, True), ({}, True),
    *[({"quantize": q}, True) for q in ("w8a8", "W4A8", "w8a8_dynamic", "W4A8_DYNAMIC",
                                         "QuantType.W8A8", "quanttype.w4a8")],
    ({"quantize": "w4a16"}, False), ({"quantize": "int8"}, False),
    ({"moe_quantize": "w4a16", "quantize": "w8a8"}, False),  # moe_quantize first
    ({"moe_quantize": "w8a8", "quantize": "w4a16"}, True),
    ({"moe_quantize": None, "quantize": "w4a16"}, False),  # falls back to quantize
])
def test_megamoe_quant_types(quant: dict[str, Any] | None, fits: bool) -> None:
    cfg = ok(outcome({"enable_fused_mc2": 1}, **FIT, quant_description=quant))
    assert cfg.enable_fused_mc2 == (1 if fits else 0)


def test_megamoe_not_installed_keeps_fused_mc2() -> None:
    cfg = ok(outcome({"enable_fused_mc2": 1}, **{**FIT, "megamoe_available": False,
                                                   "hidden_size": 1023}))
    assert (cfg.enable_fused_mc2, cfg.warnings) == (1, ())


def test_fused_mc2_zero_is_never_touched() -> None:
    cfg = ok(outcome({"enable_fused_mc2": 0, "multistream_overlap_shared_expert": True},
                     **{**FIT, "hidden_size": 1023}))
    assert (cfg.enable_fused_mc2, cfg.multistream_overlap_shared_expert, cfg.warnings) == (
        0, True, ())


@pytest.mark.parametrize(("tp", "effective"), [(1, False), (2, True), (3, True)])
def test_shared_expert_dp_tp_boundary(tp: int, effective: bool) -> None:
    cfg = ok(outcome({"enable_shared_expert_dp": True}, enable_expert_parallel=True,
                     tensor_parallel_size=tp))
    assert cfg.enable_shared_expert_dp is effective


@pytest.mark.parametrize(("size", "divides"), [(1, True), (2, True), (3, False), (4, True),
                                               (5, False), (8, False)])
def test_finegrained_size_divides_dp(size: int, divides: bool) -> None:
    result = outcome({FTP: {"mlp_tensor_parallel_size": size}}, **MOE4)
    if divides:
        assert ok(result).finegrained_tp_config.enabled_sizes() == {
            "mlp_tensor_parallel_size": size}
    else:
        assert result == [f"{FTP}.mlp_tensor_parallel_size"]


@pytest.mark.parametrize("key", ["oproj_tensor_parallel_size", "lmhead_tensor_parallel_size",
                                 "embedding_tensor_parallel_size", "mlp_tensor_parallel_size",
                                 "olora_tensor_parallel_size"])
def test_finegrained_zero_is_off_and_one_is_on(key: str) -> None:
    # On a dense model every enabled size is a problem ("only for MOE models"); 0 is off.
    assert ok(outcome({FTP: {key: 0}})).finegrained_tp_config.enabled_sizes() == {}
    assert f"{FTP}.{key}" in outcome({FTP: {key: 1}})


@pytest.mark.parametrize(("tp", "allowed"), [(1, True), (2, False)])
def test_oproj_needs_tp_one(tp: int, allowed: bool) -> None:
    result = outcome({FTP: {"oproj_tensor_parallel_size": 2}, **RECOMPUTE},
                     tensor_parallel_size=tp, **D_NODE)
    if allowed:
        assert ok(result).finegrained_tp_config.oproj_tensor_parallel_size == 2
    else:
        assert result == [f"{FTP}.oproj_tensor_parallel_size"]


@pytest.mark.parametrize(("key", "needs_recompute"), [
    ("oproj_tensor_parallel_size", True), ("embedding_tensor_parallel_size", True),
    ("olora_tensor_parallel_size", False), ("lmhead_tensor_parallel_size", False),
    ("mlp_tensor_parallel_size", False),
])
def test_which_sizes_need_the_recompute_scheduler(key: str, needs_recompute: bool) -> None:
    without = outcome({FTP: {key: 2}}, **D_NODE)
    assert (without == [f"{FTP}.{key}"]) is needs_recompute
    assert ok(outcome({FTP: {key: 2}, **RECOMPUTE}, **D_NODE)).finegrained_tp_config \
        .enabled_sizes() == {key: 2}


@pytest.mark.parametrize(("key", "role", "eager", "problems"), [
    ("olora_tensor_parallel_size", "kv_consumer", False, 0),
    ("olora_tensor_parallel_size", "kv_producer", False, 1),
    ("olora_tensor_parallel_size", "kv_consumer", True, 1),
    ("olora_tensor_parallel_size", None, True, 2),
    ("lmhead_tensor_parallel_size", None, True, 0),
])
def test_olora_placement(key: str, role: str | None, eager: bool, problems: int) -> None:
    result = outcome({FTP: {key: 2}}, is_moe=True, data_parallel_size=4, kv_role=role,
                     enforce_eager=eager)
    if problems:
        assert result == [f"{FTP}.{key}"] * problems
    else:
        assert ok(result).finegrained_tp_config.enabled_sizes() == {key: 2}


@pytest.mark.parametrize(("lmhead", "allowed"), [(0, True), (1, False), (2, False)])
def test_reduce_sample_lmhead_boundary(lmhead: int, allowed: bool) -> None:
    result = outcome({"enable_reduce_sample": True, FTP: {"lmhead_tensor_parallel_size": lmhead}},
                     **MOE4)
    if allowed:
        assert ok(result).enable_reduce_sample is True
    else:
        assert result == ["enable_reduce_sample"]


@pytest.mark.parametrize(("role", "allowed"), [("kv_producer", False), ("kv_consumer", True),
                                               ("kv_both", True), (None, True)])
def test_reduce_sample_roles(role: str | None, allowed: bool) -> None:
    result = outcome({"enable_reduce_sample": True}, kv_role=role)
    assert (result == ["enable_reduce_sample"]) is not allowed


@pytest.mark.parametrize(("env", "allowed"), [
    ({"DYNAMIC_EPLB": "true"}, True), ({"DYNAMIC_EPLB": "TRUE"}, True),
    ({"DYNAMIC_EPLB": "1"}, True), ({"DYNAMIC_EPLB": "2"}, False),
    ({"DYNAMIC_EPLB": "false"}, False), ({"EXPERT_MAP_RECORD": "true"}, True),
    ({"EXPERT_MAP_RECORD": "1"}, False), ({}, False),
])
def test_mrv1_dynamic_eplb_switch(env: dict[str, str], allowed: bool) -> None:
    result = outcome({"eplb_config": {"dynamic_eplb": True}}, env)
    if allowed:
        assert ok(result).eplb_config.dynamic_eplb is True
    else:
        assert result == ["eplb_config.dynamic_eplb"]


@pytest.mark.parametrize(("env", "refused"), [
    ({"DYNAMIC_EPLB": "1"}, ["env DYNAMIC_EPLB"]), ({"DYNAMIC_EPLB": "TRUE"}, ["env DYNAMIC_EPLB"]),
    ({"EXPERT_MAP_RECORD": "1"}, ["env EXPERT_MAP_RECORD"]),
    ({"EXPERT_MAP_RECORD": "true"}, ["env EXPERT_MAP_RECORD"]),
    ({"DYNAMIC_EPLB": "1", "EXPERT_MAP_RECORD": "true"},
     ["env DYNAMIC_EPLB", "env EXPERT_MAP_RECORD"]),
    ({"DYNAMIC_EPLB": "false", "EXPERT_MAP_RECORD": "0"}, []), ({"DYNAMIC_EPLB": "2"}, []),
    ({}, []),
])
def test_mrv2_refuses_v1_switches(env: dict[str, str], refused: list[str]) -> None:
    result = outcome({}, env, use_model_runner_v2=True)
    if refused:
        assert result == refused
    else:
        assert ok(result).eplb_config.dynamic_eplb is False


MOE = {"is_moe": True, "num_experts": 64, "data_parallel_size": 4}


D_NODE_MOE = {"kv_role": "kv_consumer", **MOE}


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [p for p, _ in found]


MEGAMOE_OK = {"megamoe_available": True, "hidden_size": 7168, "moe_intermediate_size": 2048}


CPU = "cpu_binding_config"


IRQ_OFF_ON_A5 = ("cpu_binding_config.bind_irq: IRQ binding is not available on A5; it is set "
                 "to false")


def test_oproj_tp_accepted_on_decode_node(res: Any) -> None:
    cfg = res({FTP: {"oproj_tensor_parallel_size": 2}, **RECOMPUTE}, **D_NODE_MOE)
    assert cfg.finegrained_tp_config.enabled_sizes() == {"oproj_tensor_parallel_size": 2}


def test_oproj_tp_every_violation_reported(problems: Any) -> None:
    found = problems({FTP: {"oproj_tensor_parallel_size": 3}}, tensor_parallel_size=2,
                     enforce_eager=True, data_parallel_size=4)
    lines = [line for _, line in found]
    assert paths(found) == [f"{FTP}.oproj_tensor_parallel_size"] * 6
    for needle in ("MoE models only", "divide the DP size", "needs graph mode",
                   "PD decode node", "tensor_parallel_size 1", "recompute scheduler"):
        assert any(needle in line for line in lines), needle


def test_embedding_tp_needs_recompute(problems: Any, res: Any) -> None:
    found = problems({FTP: {"embedding_tensor_parallel_size": 2}}, **MOE)
    assert paths(found) == [f"{FTP}.embedding_tensor_parallel_size"]
    cfg = res({FTP: {"embedding_tensor_parallel_size": 2}, **RECOMPUTE}, **D_NODE_MOE)
    assert cfg.finegrained_tp_config.enabled_sizes() == {"embedding_tensor_parallel_size": 2}
    assert cfg.scheduler_config.recompute_scheduler_enable is True


def test_olora_tp_needs_graph_mode_and_consumer(problems: Any) -> None:
    found = problems({FTP: {"olora_tensor_parallel_size": 2}}, enforce_eager=True, **MOE)
    assert len(found) == 2


@pytest.mark.parametrize("key", ["lmhead_tensor_parallel_size", "mlp_tensor_parallel_size"])
def test_any_size_needs_moe_and_divides_dp(problems: Any, res: Any, key: str) -> None:
    assert paths(problems({FTP: {key: 2}}, data_parallel_size=4)) == [f"{FTP}.{key}"]
    assert paths(problems({FTP: {key: 3}}, **MOE)) == [f"{FTP}.{key}"]
    assert res({FTP: {key: 2}}, **MOE).finegrained_tp_config.enabled_sizes() == {key: 2}


@pytest.mark.parametrize("soc", ["A2", "A3"])
def test_hierarchy_accepts_exactly_512_experts(res: Any, soc: str) -> None:
    assert res({"enable_mc2_hierarchy_comm": True}, soc=soc, num_experts=512, is_moe=True
               ).enable_mc2_hierarchy_comm


def test_hierarchy_counts_dynamic_eplb_redundancy(problems: Any) -> None:
    found = problems({"enable_mc2_hierarchy_comm": True, "eplb_config": {
        "dynamic_eplb": True, "num_redundant_experts": 33}}, env={"DYNAMIC_EPLB": "true"},
        soc="A3", num_experts=480)
    [(path, line)] = found
    assert path == "enable_mc2_hierarchy_comm"
    assert "513 experts (480 logical experts + 33 EPLB redundant experts)" in line


def test_hierarchy_ignores_redundancy_without_dynamic_eplb(res: Any) -> None:
    cfg = res({"enable_mc2_hierarchy_comm": True, "eplb_config": {"num_redundant_experts": 33}},
              soc="A3", num_experts=480)
    # 480 + 33 = 513 would be over the limit, but without dynamic EPLB only 480 count.
    assert cfg.enable_mc2_hierarchy_comm is True
    assert (cfg.eplb_config.dynamic_eplb, cfg.eplb_config.num_redundant_experts) == (False, 33)


@pytest.mark.parametrize("soc", ["A5", "310P", "cpu"])
def test_hierarchy_rejected_off_a2_a3(problems: Any, soc: str) -> None:
    [(path, line)] = problems({"enable_mc2_hierarchy_comm": True}, soc=soc)
    assert path == "enable_mc2_hierarchy_comm" and soc in line


def test_hierarchy_rejected_with_fused_mc2(problems: Any) -> None:
    [(_, line)] = problems({"enable_mc2_hierarchy_comm": True, "enable_fused_mc2": 1})
    assert "fused MC2" in line


def test_fused_mc2_rejected_for_minimax_m3(problems: Any) -> None:
    [(path, _)] = problems({"enable_fused_mc2": 1}, architectures=("MiniMaxM3ForCausalLM",))
    assert path == "enable_fused_mc2"


@pytest.mark.parametrize(("facts", "expected"), [
    (MEGAMOE_OK, 1),
    ({**MEGAMOE_OK, "hidden_size": 7000}, 0),
    ({**MEGAMOE_OK, "hidden_size": 512}, 0),
    ({**MEGAMOE_OK, "moe_intermediate_size": 4096}, 0),
    ({**MEGAMOE_OK, "moe_intermediate_size": 0}, 0),
    # range edges: hidden 1024..8192 and intermediate 1024..3072, both multiples of 512
    ({**MEGAMOE_OK, "hidden_size": 8192}, 1), ({**MEGAMOE_OK, "hidden_size": 8704}, 0),
    ({**MEGAMOE_OK, "hidden_size": 1024}, 1),
    ({**MEGAMOE_OK, "moe_intermediate_size": 3072}, 1),
    ({**MEGAMOE_OK, "moe_intermediate_size": 3584}, 0),
    ({**MEGAMOE_OK, "moe_intermediate_size": 1024}, 1),
    ({**MEGAMOE_OK, "quant_description": {"quantize": "W8A8_DYNAMIC"}}, 1),
    ({**MEGAMOE_OK, "quant_description": {"moe_quantize": "w4a16"}}, 0),
    ({**MEGAMOE_OK, "hidden_size": 7000, "megamoe_available": False}, 1),
])
def test_fused_mc2_forced_off_when_megamoe_does_not_fit(
    res: Any, facts: dict[str, Any], expected: int
) -> None:
    cfg = res({"enable_fused_mc2": 1}, **facts)
    assert cfg.enable_fused_mc2 == expected
    assert any("MegaMoE" in w for w in cfg.warnings) == (expected == 0)


@pytest.mark.parametrize(("flag", "ep", "tp", "expected"), [
    (True, True, 2, True), (True, False, 2, False), (True, True, 1, False),
    (False, True, 2, False),
])
def test_shared_expert_dp_effective_value(
    res: Any, flag: bool, ep: bool, tp: int, expected: bool
) -> None:
    cfg = res({"enable_shared_expert_dp": flag}, enable_expert_parallel=ep,
              tensor_parallel_size=tp)
    assert cfg.enable_shared_expert_dp is expected


def test_overlap_forced_off_with_fused_mc2(res: Any) -> None:
    cfg = res({"multistream_overlap_shared_expert": True, "enable_fused_mc2": 1})
    assert cfg.multistream_overlap_shared_expert is False and len(cfg.warnings) == 1
    assert res({"multistream_overlap_shared_expert": True}).multistream_overlap_shared_expert


def test_mix_placement_conflicts(problems: Any, res: Any) -> None:
    assert paths(problems({"mix_placement": True, "multistream_overlap_shared_expert": True})
                 ) == ["mix_placement"]
    assert paths(problems({"mix_placement": True, "enable_shared_expert_dp": True},
                          enable_expert_parallel=True, tensor_parallel_size=2)) == ["mix_placement"]
    # Shared-expert DP that is not effective (TP 1) does not conflict.
    assert res({"mix_placement": True, "enable_shared_expert_dp": True}).mix_placement


def test_reduce_sample(problems: Any, res: Any) -> None:
    cfg = res({"enable_reduce_sample": True}, kv_role="kv_consumer")
    assert cfg.warnings == ("enable_reduce_sample is experimental",)
    assert len(problems({"enable_reduce_sample": True}, kv_role="kv_producer")) == 1
    found = problems({"enable_reduce_sample": True, FTP: {"lmhead_tensor_parallel_size": 2}},
                     **MOE)
    assert paths(found) == ["enable_reduce_sample"]


@pytest.mark.parametrize("soc", ["A2", "A3", "A5", "310P", "cpu"])
def test_min_cpus_default_is_the_socs_own(res: Any, soc: str) -> None:
    # None = "the SoC's default", which ascend-topology's planner decides (A5 3, others 5).
    cfg = res(None, soc=soc).cpu_binding_config
    assert (cfg.min_cpus_per_npu, cfg.bind_irq) == (None, False)


@pytest.mark.parametrize("soc", ["A2", "A5"])
@pytest.mark.parametrize("value", [3, 4, 5, 6, 1024])
def test_explicit_min_cpus_passes_through(res: Any, soc: str, value: int) -> None:
    assert res({CPU: {"min_cpus_per_npu": value}}, soc=soc).cpu_binding_config.min_cpus_per_npu \
        == value


# bind_irq reserves 2 IRQ CPUs + main + acl + release: an explicit minimum needs >= 5.
@pytest.mark.parametrize(("value", "ok"), [(None, True), (3, False), (4, False), (5, True),
                                           (6, True)])
@pytest.mark.parametrize("soc", ["A2", "A3", "310P"])
def test_bind_irq_needs_five_cpus(res: Any, problems: Any, soc: str, value: int | None,
                                  ok: bool) -> None:
    config = {CPU: {"bind_irq": True, "min_cpus_per_npu": value}}
    if ok:
        cfg = res(config, soc=soc)
        assert (cfg.cpu_binding_config.bind_irq, cfg.cpu_binding_config.min_cpus_per_npu,
                cfg.warnings) == (True, value, ())
    else:
        assert problems(config, soc=soc) == [(
            f"{CPU}.min_cpus_per_npu",
            f"{CPU}.min_cpus_per_npu: 2 IRQ + main + acl + release CPUs (given {value}; "
            "allowed: null or an integer >= 5 with bind_irq)")]


@pytest.mark.parametrize("value", [None, 3, 4, 5])
def test_bind_irq_is_off_on_a5(res: Any, value: int | None) -> None:
    cfg = res({CPU: {"bind_irq": True, "min_cpus_per_npu": value}}, soc="A5")
    assert (cfg.cpu_binding_config.bind_irq, cfg.cpu_binding_config.min_cpus_per_npu) == (
        False, value)
    assert cfg.warnings == (IRQ_OFF_ON_A5,)
    assert res({CPU: {"bind_irq": False}}, soc="A5").warnings == ()


@pytest.mark.parametrize("env", [{"DYNAMIC_EPLB": "true"}, {"DYNAMIC_EPLB": "1"},
                                 {"DYNAMIC_EPLB": "TRUE"}, {"EXPERT_MAP_RECORD": "true"}])
def test_dynamic_eplb_needs_switch_on_mrv1(res: Any, problems: Any, env: dict[str, str]) -> None:
    assert res({"eplb_config": {"dynamic_eplb": True}}, env=env).eplb_config.dynamic_eplb
    assert paths(problems({"eplb_config": {"dynamic_eplb": True}})) == ["eplb_config.dynamic_eplb"]


def test_record_path_forces_dynamic_eplb(res: Any) -> None:
    cfg = res({"eplb_config": {"expert_map_record_path": "/tmp/rec.json"}},
              env={"DYNAMIC_EPLB": "true"})
    assert cfg.eplb_config.dynamic_eplb is True


@pytest.mark.parametrize("phase", ["all", "prefill", "decode"])
def test_load_collection_phase_is_mrv2_only(res: Any, problems: Any, phase: str) -> None:
    cfg = res({"eplb_config": {"load_collection_phase": phase}}, use_model_runner_v2=True,
              enable_eplb=True)
    assert cfg.eplb_config.load_collection_phase == phase
    assert paths(problems({"eplb_config": {"load_collection_phase": phase}})) == [
        "eplb_config.load_collection_phase"]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_partial_load_collection_needs_vllm_eplb(res: Any, problems: Any, phase: str) -> None:
    found = problems({"eplb_config": {"load_collection_phase": phase}},
                     use_model_runner_v2=True)
    assert paths(found) == ["eplb_config.load_collection_phase"]
    assert "'all' unless vLLM's --enable-eplb is on" in found[0][1]
    assert res({"eplb_config": {"load_collection_phase": "all"}},
               use_model_runner_v2=True).eplb_config.load_collection_phase == "all"


def test_vllm_eplb_is_mrv2_only(res: Any, problems: Any) -> None:
    found = problems({}, enable_eplb=True)
    assert paths(found) == ["vllm --enable-eplb"]
    assert "model runner v2" in found[0][1] and "eplb_config.dynamic_eplb" in found[0][1]
    assert res({}, enable_eplb=True, use_model_runner_v2=True).eplb_config.dynamic_eplb is False


def test_mrv2_rejects_legacy_fields_and_env(problems: Any) -> None:
    found = problems({"eplb_config": {"num_redundant_experts": 2, "dynamic_eplb": False}},
                     env={"DYNAMIC_EPLB": "1"}, use_model_runner_v2=True)
    assert paths(found) == ["eplb_config", "env DYNAMIC_EPLB"]
    assert "dynamic_eplb, num_redundant_experts" in found[0][1]
