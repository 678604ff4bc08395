"""Cross-field and deployment rules (reference 2.3-2.6, 4.4 checks on additional_config keys)."""

from __future__ import annotations

from typing import Any

import pytest

FTP = "finegrained_tp_config"
MOE = {"is_moe": True, "num_experts": 64, "data_parallel_size": 4}
D_NODE = {"kv_role": "kv_consumer", **MOE}
RECOMPUTE = {"scheduler_config": {"recompute_scheduler_enable": True}}


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [p for p, _ in found]


# --- fine-grained TP ----------------------------------------------------------------------

def test_oproj_tp_accepted_on_decode_node(res: Any) -> None:
    cfg = res({FTP: {"oproj_tensor_parallel_size": 2}, **RECOMPUTE}, **D_NODE)
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
    cfg = res({FTP: {"embedding_tensor_parallel_size": 2}, **RECOMPUTE}, **D_NODE)
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


# --- MC2 variants, shared experts ---------------------------------------------------------

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


MEGAMOE_OK = {"megamoe_available": True, "hidden_size": 7168, "moe_intermediate_size": 2048}


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


CPU = "cpu_binding_config"
IRQ_OFF_ON_A5 = ("cpu_binding_config.bind_irq: IRQ binding is not available on A5; it is set "
                 "to false")


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


# --- EPLB ---------------------------------------------------------------------------------

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


# --- compilation and xlite ----------------------------------------------------------------

def test_static_kernel_requires_npugraph_ex(problems: Any, res: Any) -> None:
    found = problems({"ascend_compilation_config": {"enable_static_kernel": True,
                                                    "enable_npugraph_ex": False}})
    assert paths(found) == ["ascend_compilation_config.enable_static_kernel"]
    comp = res({"ascend_compilation_config": {"enable_static_kernel": True}}
               ).ascend_compilation_config
    assert comp.enable_static_kernel and comp.enable_npugraph_ex


def test_310p_disables_both_with_two_warnings(res: Any) -> None:
    cfg = res({"ascend_compilation_config": {"enable_static_kernel": True,
                                             "enable_npugraph_ex": True}}, soc="310P")
    comp = cfg.ascend_compilation_config
    assert (comp.enable_npugraph_ex, comp.enable_static_kernel) == (False, False)
    assert cfg.warnings == (
        "ascend_compilation_config.enable_npugraph_ex is not supported on 310P; it is set to false",
        "ascend_compilation_config.enable_static_kernel is not supported on 310P; it is set to "
        "false",
    )


def test_310p_default_npugraph_ex_is_off_silently(res: Any) -> None:
    cfg = res(None, soc="310P")
    assert not cfg.ascend_compilation_config.enable_npugraph_ex and cfg.warnings == ()


def test_eager_mode_turns_graph_options_off(res: Any) -> None:
    comp = res(None, enforce_eager=True).ascend_compilation_config
    assert (comp.enable_npugraph_ex, comp.enable_static_kernel) == (False, False)
    assert comp.fuse_norm_quant


def test_xlite_rules(problems: Any, res: Any) -> None:
    on = {"xlite_graph_config": {"enabled": True}}
    assert res(on, speculative_method="eagle", num_speculative_tokens=1).xlite_graph_config.enabled
    found = problems(on, speculative_method="mtp", num_speculative_tokens=2,
                     pipeline_parallel_size=2)
    assert paths(found) == ["xlite_graph_config.enabled"] * 2
    cfg = res(on, block_size=256)
    assert len(cfg.warnings) == 1 and "block_size 256" in cfg.warnings[0]


# --- model features -----------------------------------------------------------------------

def test_kv_nz(res: Any, problems: Any) -> None:
    assert res({"enable_kv_nz": True}, use_mla=True, kv_role="kv_consumer").enable_kv_nz
    assert len(problems({"enable_kv_nz": True}, use_mla=True, kv_role="kv_producer")) == 1
    assert len(problems({"enable_kv_nz": True}, use_mla=True, index_topk=2048,
                        kv_role="kv_consumer")) == 1
    assert len(problems({"enable_kv_nz": True})) == 2


@pytest.mark.parametrize(("facts", "sfa"), [
    ({"index_topk": 2048}, True), ({}, False),
    ({"index_topk": 2048, "has_compress_ratios": True}, False)])
def test_sparse_c8_effective_only_for_sfa(res: Any, facts: dict[str, Any], sfa: bool) -> None:
    cfg = res({"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True,
               "c8_enable_reshape_optim": True}, **facts)
    assert (cfg.enable_sparse_sfa_c8, cfg.enable_sparse_li_c8, cfg.c8_enable_reshape_optim) == (
        sfa, sfa, sfa)


def test_li_c8_layer_filter(res: Any) -> None:
    quant = {"model.layers.3.self_attn.indexer.quant_type": "INT8_DYNAMIC",
             "model.layers.7.self_attn.indexer.wq_b_weight": "W8A8_MXFP8",
             "model.layers.9.self_attn.indexer.quant_type": "FLOAT"}
    cfg = res({"enable_sparse_li_c8": True}, index_topk=2048, quant_description=quant)
    assert cfg.sparse_li_c8_layer_filter
    assert cfg.sparse_li_c8_layer_ids == (3, 7)
    assert cfg.is_sparse_li_c8_layer("model.layers.3.self_attn")
    assert cfg.is_sparse_li_c8_layer("model.layers.7.self_attn.indexer")
    assert cfg.is_sparse_li_c8_layer("layers.3.mlp")
    assert not cfg.is_sparse_li_c8_layer("model.layers.9.self_attn")
    every = res({"enable_sparse_li_c8": True}, index_topk=2048)
    assert not every.sparse_li_c8_layer_filter and every.is_sparse_li_c8_layer("anything")
    assert not res({}, index_topk=2048).is_sparse_li_c8_layer("model.layers.3.self_attn")


SKO = {"sparse_kv_offload_config": {"enabled": True}}


def test_sparse_kv_offload_accepted_on_sfa_decode_node(res: Any) -> None:
    assert res(SKO, index_topk=2048, kv_role="kv_consumer").sparse_kv_offload_config.enabled


@pytest.mark.parametrize(("facts", "needle"), [
    ({"index_topk": 2048, "has_compress_ratios": True, "kv_role": "kv_consumer"},
     "compressed-attention"),
    ({"kv_role": "kv_consumer"}, "SFA sparse-attention"),
    ({"index_topk": 2048, "kv_role": "kv_consumer", "decode_context_parallel_size": 2}, "PCP*DCP"),
    ({"index_topk": 2048, "kv_role": "kv_consumer", "pipeline_parallel_size": 2}, "pipeline"),
    ({"index_topk": 2048, "kv_role": "kv_consumer", "use_model_runner_v2": True}, "v1 only"),
    ({"index_topk": 2048, "kv_role": "kv_producer"}, "decode nodes"),
    ({"index_topk": 8192, "kv_role": "kv_consumer"}, "smaller than top-k"),
])
def test_sparse_kv_offload_rejections(problems: Any, facts: dict[str, Any], needle: str) -> None:
    [(_, line)] = problems(SKO, **facts)
    assert needle in line


def test_sparse_kv_offload_keep_device_cache(res: Any, problems: Any) -> None:
    cfg = res({"sparse_kv_offload_config": {"enabled": True, "keep_device_kv_cache": True}},
              index_topk=2048)
    assert cfg.warnings == ("sparse_kv_offload_config.keep_device_kv_cache is for debugging only",)
    found = problems({**SKO, "enable_sparse_sfa_c8": True}, index_topk=2048,
                     kv_role="kv_consumer")
    assert "SFA C8" in found[0][1]


def _pd(prefill: int, decode: int, **facts: Any) -> dict[str, Any]:
    extra = {"prefill": {"tp_size": prefill}, "decode": {"tp_size": decode}}
    return {"kv_role": "kv_both", "kv_connector_extra_config": extra, **facts}


@pytest.mark.parametrize(("prefill", "decode", "kv_heads", "ratios"), [
    (1, 1, 8, (1, 1, 1)),
    (8, 2, 4, (4, 2, 2)),
    (16, 4, 8, (4, 2, 2)),
    (4, 1, 8, (4, 4, 1)),
    (8, 8, 2, (1, 1, 1)),
])
def test_pd_head_ratios(res: Any, prefill: int, decode: int, kv_heads: int,
                        ratios: tuple[int, int, int]) -> None:
    cfg = res(None, **_pd(prefill, decode, num_key_value_heads=kv_heads))
    assert (cfg.pd_tp_ratio, cfg.pd_head_ratio, cfg.num_head_replica) == ratios


def test_pd_ratio_rules(res: Any, problems: Any) -> None:
    assert paths(problems(None, **_pd(6, 4, num_key_value_heads=8))) == [
        "facts.kv_connector_extra_config.prefill.tp_size"]
    assert paths(problems(None, **_pd(8, 2))) == ["facts.num_key_value_heads"]
    cfg = res(None, **_pd(8, 2, use_mla=True))  # MLA models are skipped
    assert cfg.pd_tp_ratio == 1


def test_kv_extra_config_must_match_local_sizes(problems: Any, res: Any) -> None:
    extra = {"prefill": {"tp_size": 8, "dp_size": 2}, "decode": {"tp_size": 4, "dp_size": 4}}
    found = problems(None, kv_role="kv_consumer", kv_connector_extra_config=extra,
                     tensor_parallel_size=2, data_parallel_size=4, num_key_value_heads=8)
    assert paths(found) == ["facts.kv_connector_extra_config.decode.tp_size"]
    cfg = res(None, kv_role="kv_producer", kv_connector_extra_config=extra,
              tensor_parallel_size=8, data_parallel_size=2, num_key_value_heads=8)
    # prefill 8 // decode 4 = 2; 8 heads: min(8,8)//min(4,8) = 2, replica 8 // 8 = 1
    assert (cfg.pd_tp_ratio, cfg.pd_head_ratio, cfg.num_head_replica) == (2, 2, 1)


C8 = {"quant_description": {"enable_c8_quant": True}, "num_attention_heads": 32,
      "num_key_value_heads": 8}


@pytest.mark.parametrize("role", ["kv_consumer", "kv_producer", "kv_both"])
def test_mooncake_c8_rejected_for_gqa(problems: Any, role: str) -> None:
    assert paths(problems(None, kv_role=role, kv_connector="MooncakeConnectorV1", **C8)) == [
        "facts.kv_connector"]


def test_mooncake_c8_found_inside_multi_connector(problems: Any) -> None:
    extra = {"connectors": [{"kv_connector": "LMCacheConnector"},
                            {"kv_connector": "MooncakeConnector"}]}
    assert len(problems(None, kv_role="kv_both", kv_connector="MultiConnector",
                        kv_connector_extra_config=extra, **C8)) == 1


@pytest.mark.parametrize("facts", [
    {"kv_connector": "MooncakeLayerwiseConnector", **C8},
    {"kv_connector": "MooncakeConnector", **C8, "num_key_value_heads": 32},
    {"kv_connector": "MooncakeConnector", **C8, "use_mla": True},
])
def test_mooncake_c8_allowed_cases(res: Any, facts: dict[str, Any]) -> None:
    cfg = res(None, kv_role="kv_consumer", **facts)
    # Accepted, and identical to the config without any kv connector named.
    assert cfg == res(None, kv_role="kv_consumer", **{**facts, "kv_connector": None})


def test_training_consistency_needs_plain_attention(problems: Any, res: Any) -> None:
    rl = {"rl_config": {"enabled": True, "enable_training_consistency": True}}
    assert res(rl).rl_config.enable_training_consistency
    assert paths(problems(rl, use_mla=True)) == ["rl_config.enable_training_consistency"]


def test_bad_facts_are_problems(problems: Any) -> None:
    assert paths(problems(None, soc="B9", kv_role="both")) == ["facts.soc", "facts.kv_role"]


def test_wrongly_typed_facts_are_problems_not_crashes(problems: Any) -> None:
    found = problems({"finegrained_tp_config": {"mlp_tensor_parallel_size": 2}},
                     tensor_parallel_size="2", quant_description=[1], architectures="Qwen")
    # Rules then judge the config against default facts (dense, DP 1): two problems.
    assert paths(found) == ["facts.tensor_parallel_size", "facts.architectures",
                            "facts.quant_description"] + [f"{FTP}.mlp_tensor_parallel_size"] * 2


def test_new_facts_are_type_checked(problems: Any, res: Any) -> None:
    found = problems(None, scheduler_policy=1, nnodes_within_dp=-1, sequence_parallel="yes",
                     enable_eplb=0)
    assert paths(found) == ["facts.sequence_parallel", "facts.scheduler_policy",
                            "facts.nnodes_within_dp", "facts.enable_eplb"]
    facts = {"sequence_parallel": True, "scheduler_policy": "priority", "nnodes_within_dp": 2,
             "enable_eplb": False}
    from ascend_config import DeploymentFacts

    loaded = DeploymentFacts.from_mapping(facts)
    assert (loaded.sequence_parallel, loaded.scheduler_policy, loaded.nnodes_within_dp) == (
        True, "priority", 2)
    assert res(None, **facts).soc == "A2"  # none of them is a problem on its own


def test_li_c8_layers_after_unrelated_quant_keys_and_nested_indexer_names(res: Any) -> None:
    # Unrelated keys come first; the layer name holds ".indexer." itself, so the layer is
    # everything before the last ".indexer."; a name without "layers.N" still counts by name.
    quant = {"model.embed_tokens.weight": "FLOAT",
             "mtp.indexer.layers.5.self_attn.indexer.quant_type": "INT8_DYNAMIC",
             "XmtpX.indexer.quant_type": "W8A8_MXFP8"}
    cfg = res({"enable_sparse_li_c8": True}, index_topk=2048, quant_description=quant)
    assert cfg.sparse_li_c8_layer_names == ("XmtpX", "mtp.indexer.layers.5.self_attn")
    assert cfg.sparse_li_c8_layer_ids == (5,)
    assert cfg.is_sparse_li_c8_layer("XmtpX") and cfg.is_sparse_li_c8_layer(".XmtpX.")
    assert not cfg.is_sparse_li_c8_layer("mtp")
