"""Every numeric rule at, just below and just above its limit.

Expected values are the rules as the reference states them (upstream-behaviour.md sections
2.3-2.6 and 4.4), worked out by hand in each table row; none is read back from the code.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import AscendConfig, AscendConfigError, DeploymentFacts, resolve


def outcome(config: dict[str, Any] | None, env: dict[str, str] | None = None,
            **facts: Any) -> AscendConfig | list[str]:
    """The resolved config, or the paths of the problems."""
    try:
        return resolve(config, DeploymentFacts(**facts), dict(env or {}))
    except AscendConfigError as exc:
        return [p.path for p in exc.problems]


def ok(result: AscendConfig | list[str]) -> AscendConfig:
    assert isinstance(result, AscendConfig), result
    return result


# --- 2.3 enable_mc2_hierarchy_comm: at most 512 experts, redundant ones only with dynamic EPLB

HIER = "enable_mc2_hierarchy_comm"
DYN = {"DYNAMIC_EPLB": "true"}


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


# --- 2.3 MegaMoE fit: hidden 1024..8192 and intermediate 1024..3072, multiples of 512 --------

FIT = {"megamoe_available": True, "hidden_size": 4096, "moe_intermediate_size": 2048}


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


# --- 2.3 enable_shared_expert_dp: flag and expert parallel and TP > 1 -----------------------

@pytest.mark.parametrize(("tp", "effective"), [(1, False), (2, True), (3, True)])
def test_shared_expert_dp_tp_boundary(tp: int, effective: bool) -> None:
    cfg = ok(outcome({"enable_shared_expert_dp": True}, enable_expert_parallel=True,
                     tensor_parallel_size=tp))
    assert cfg.enable_shared_expert_dp is effective


# --- 2.4 fine-grained TP: size > 0 is on; it must divide DP; o_proj needs TP 1 --------------

FTP = "finegrained_tp_config"
MOE4 = {"is_moe": True, "data_parallel_size": 4}


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


D_NODE = {"kv_role": "kv_consumer", **MOE4}
RECOMPUTE = {"scheduler_config": {"recompute_scheduler_enable": True}}


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


# --- 2.3 enable_reduce_sample: not with lm_head TP > 0, not on kv_producer -----------------

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


# --- 2.4 xlite: exactly 1 speculative token, PP 1, block size 128 advised -------------------

XLITE = {"xlite_graph_config": {"enabled": True}}


@pytest.mark.parametrize(("tokens", "allowed"), [(0, False), (1, True), (2, False)])
def test_xlite_speculative_tokens(tokens: int, allowed: bool) -> None:
    result = outcome(XLITE, speculative_method="mtp", num_speculative_tokens=tokens)
    if allowed:
        assert ok(result).xlite_graph_config.enabled is True
    else:
        assert result == ["xlite_graph_config.enabled"]
    # Without speculative decoding the token count does not matter.
    assert ok(outcome(XLITE, num_speculative_tokens=tokens)).xlite_graph_config.enabled


@pytest.mark.parametrize(("pp", "allowed"), [(1, True), (2, False)])
def test_xlite_pipeline_parallel(pp: int, allowed: bool) -> None:
    result = outcome(XLITE, pipeline_parallel_size=pp)
    assert (result == ["xlite_graph_config.enabled"]) is not allowed


@pytest.mark.parametrize(("block", "warns"), [(127, True), (128, False), (129, True)])
def test_xlite_block_size_warning(block: int, warns: bool) -> None:
    cfg = ok(outcome(XLITE, block_size=block))
    expected = (f"xlite_graph_config.enabled: block_size {block} is not 128; xlite is tuned "
                "for 128 (larger sizes are reduced to 128)",)
    assert cfg.warnings == (expected if warns else ())


# --- 2.3 profiling chunk: clamp min_chunk to max_num_batched_tokens, PP > 1 -----------------

PC = {"scheduler_config": {"profiling_chunk_config": {"enabled": True, "min_chunk": 4096}}}


@pytest.mark.parametrize(("tokens", "min_chunk", "warns"), [
    (4095, 4095, True), (4096, 4096, False), (4097, 4096, False)])
def test_profiling_chunk_clamp(tokens: int, min_chunk: int, warns: bool) -> None:
    cfg = ok(outcome(PC, pipeline_parallel_size=2, max_num_batched_tokens=tokens))
    assert cfg.scheduler_config.profiling_chunk_config.min_chunk == min_chunk
    assert len(cfg.warnings) == (1 if warns else 0)


@pytest.mark.parametrize(("pp", "allowed"), [(1, False), (2, True)])
def test_profiling_chunk_needs_pp_above_one(pp: int, allowed: bool) -> None:
    result = outcome(PC, pipeline_parallel_size=pp)
    path = "scheduler_config.profiling_chunk_config.enabled"
    assert (result == [path]) is not allowed


# --- 4.4 DyntraLB: DP > 1 and nnodes_within_dp == 1 -----------------------------------------

DL = {"scheduler_config": {"dyntra_lb_config": {"enabled": True}}}
DL_PATH = "scheduler_config.dyntra_lb_config.enabled"


@pytest.mark.parametrize(("dp", "nnodes", "problems"), [
    (1, 1, 1), (2, 1, 0), (3, 1, 0), (2, 2, 1), (1, 2, 2)])
def test_dyntra_lb_dp_and_nodes(dp: int, nnodes: int, problems: int) -> None:
    result = outcome(DL, kv_role="kv_consumer", data_parallel_size=dp, nnodes_within_dp=nnodes)
    if problems:
        assert result == [DL_PATH] * problems
    else:
        assert ok(result).scheduler_config.dyntra_lb_config.enabled is True


# --- 2.4 sparse KV offload: buffer >= index_topk, PCP*DCP == 1, PP == 1 ---------------------

SKO = {"sparse_kv_offload_config": {"enabled": True}}
SFA_D = {"index_topk": 2048, "kv_role": "kv_consumer"}


@pytest.mark.parametrize(("buffer", "allowed"), [(2047, False), (2048, True), (2049, True)])
def test_offload_buffer_vs_topk(buffer: int, allowed: bool) -> None:
    result = outcome({"sparse_kv_offload_config": {"enabled": True, "topk_buffer_size": buffer}},
                     **SFA_D)
    if allowed:
        assert ok(result).sparse_kv_offload_config.topk_buffer_size == buffer
    else:
        assert result == ["sparse_kv_offload_config.topk_buffer_size"]


@pytest.mark.parametrize(("pcp", "dcp", "pp", "problems"), [
    (1, 1, 1, 0), (2, 1, 1, 1), (1, 2, 1, 1), (2, 2, 1, 1), (1, 1, 2, 1), (2, 1, 2, 2)])
def test_offload_cp_and_pp(pcp: int, dcp: int, pp: int, problems: int) -> None:
    result = outcome(SKO, prefill_context_parallel_size=pcp, decode_context_parallel_size=dcp,
                     pipeline_parallel_size=pp, **SFA_D)
    if problems:
        assert result == ["sparse_kv_offload_config.enabled"] * problems
    else:
        assert ok(result).sparse_kv_offload_config.enabled is True


# --- 2.6 PD ratios: prefill % decode == 0; replicas and head ratio from the KV heads --------

def _pd(prefill: Any, decode: Any, **facts: Any) -> dict[str, Any]:
    extra = {"prefill": {"tp_size": prefill}, "decode": {"tp_size": decode}}
    return {"kv_role": "kv_both", "kv_connector_extra_config": extra, **facts}


# (prefill, decode, kv heads) -> (pd_tp_ratio, pd_head_ratio, num_head_replica), by hand:
# ratio = p // d; replica = p // h if p >= h else 1; head ratio = min(p, h) // min(d, h).
@pytest.mark.parametrize(("prefill", "decode", "heads", "ratios"), [
    (16, 8, 4, (2, 1, 4)),   # 16 // 8; min(16,4)//min(8,4) = 1; 16 // 4
    (8, 4, 8, (2, 2, 1)),    # prefill == heads: 8 // 8 replica
    (8, 4, 9, (2, 2, 1)),    # prefill < heads: replica 1; 8 // 4
    (8, 4, 7, (2, 1, 1)),    # prefill > heads: 8 // 7 = 1; 7 // 4 = 1
    (8, 2, 16, (4, 4, 1)),
    (4, 4, 1, (1, 1, 1)),    # ratio 1: nothing else derived
    (2, 1, 1, (2, 1, 2)),    # 2 // 1; min(2,1)//min(1,1) = 1; 2 // 1
])
def test_pd_ratio_table(prefill: int, decode: int, heads: int,
                        ratios: tuple[int, int, int]) -> None:
    cfg = ok(outcome(None, **_pd(prefill, decode, num_key_value_heads=heads)))
    assert (cfg.pd_tp_ratio, cfg.pd_head_ratio, cfg.num_head_replica) == ratios


PREFILL_TP = "facts.kv_connector_extra_config.prefill.tp_size"


@pytest.mark.parametrize(("prefill", "decode", "divides"), [
    (8, 8, True), (8, 4, True), (6, 4, False), (4, 8, False), (9, 3, True), (10, 3, False)])
def test_pd_prefill_must_be_a_multiple(prefill: int, decode: int, divides: bool) -> None:
    result = outcome(None, **_pd(prefill, decode, num_key_value_heads=8))
    if divides:
        assert ok(result).pd_tp_ratio == prefill // decode
    else:
        assert result == [PREFILL_TP]


@pytest.mark.parametrize(("heads", "allowed"), [(0, False), (1, True)])
def test_pd_needs_kv_heads_when_ratio_above_one(heads: int, allowed: bool) -> None:
    result = outcome(None, **_pd(2, 1, num_key_value_heads=heads))
    assert (result == ["facts.num_key_value_heads"]) is not allowed
    assert ok(outcome(None, **_pd(1, 1, num_key_value_heads=heads))).pd_tp_ratio == 1


@pytest.mark.parametrize(("value", "allowed"), [(-1, False), (0, False), (1, True), (2, True),
                                                (True, False), (1.0, False), ("2", False)])
def test_pd_tp_size_must_be_a_positive_integer(value: Any, allowed: bool) -> None:
    result = outcome(None, **_pd(value, 1, num_key_value_heads=8))
    if allowed:
        assert ok(result).pd_tp_ratio == value
    else:
        assert result == [PREFILL_TP]


@pytest.mark.parametrize(("given", "allowed"), [(1, False), (2, True), (3, False)])
def test_local_tp_must_match_on_consumer(given: int, allowed: bool) -> None:
    extra = {"prefill": {"tp_size": 4}, "decode": {"tp_size": given}}
    result = outcome(None, kv_role="kv_consumer", kv_connector_extra_config=extra,
                     tensor_parallel_size=2, num_key_value_heads=8)
    if allowed:
        assert ok(result).pd_tp_ratio == 2
    elif given == 1:
        assert result == ["facts.kv_connector_extra_config.decode.tp_size"]
    else:  # 4 % 3 != 0 as well
        assert result == ["facts.kv_connector_extra_config.decode.tp_size", PREFILL_TP]


@pytest.mark.parametrize(("given", "allowed"), [(3, False), (4, True), (5, False)])
def test_local_dp_must_match_on_producer(given: int, allowed: bool) -> None:
    extra = {"prefill": {"tp_size": 2, "dp_size": given}, "decode": {"tp_size": 2}}
    result = outcome(None, kv_role="kv_producer", kv_connector_extra_config=extra,
                     tensor_parallel_size=2, data_parallel_size=4, num_key_value_heads=8)
    if allowed:
        assert ok(result).pd_tp_ratio == 1
    else:
        assert result == ["facts.kv_connector_extra_config.prefill.dp_size"]


def test_pd_ratios_default_without_kv_transfer_or_for_mla() -> None:
    extra = {"prefill": {"tp_size": 8}, "decode": {"tp_size": 2}}
    for facts in ({"kv_connector_extra_config": extra, "num_key_value_heads": 8},
                  _pd(8, 2, num_key_value_heads=8, use_mla=True)):
        cfg = ok(outcome(None, **facts))
        assert (cfg.pd_tp_ratio, cfg.pd_head_ratio, cfg.num_head_replica) == (1, 1, 1)


# --- 2.3 Mooncake + C8: only GQA models (heads != kv heads) are refused ---------------------

@pytest.mark.parametrize(("heads", "kv_heads", "refused"), [
    (32, 31, True), (32, 32, False), (32, 33, True), (32, 8, True)])
def test_mooncake_c8_gqa_boundary(heads: int, kv_heads: int, refused: bool) -> None:
    facts = {"kv_role": "kv_both", "quant_description": {"enable_c8_quant": True},
             "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    result = outcome(None, kv_connector="MooncakeConnector", **facts)
    if refused:
        assert result == ["facts.kv_connector"]
    else:  # accepted, and the same config as with the layerwise connector
        assert ok(result) == ok(outcome(None, kv_connector="MooncakeLayerwiseConnector",
                                        **facts))


@pytest.mark.parametrize("flag", [False, "true", 1, None])
def test_mooncake_c8_needs_c8_exactly_true(flag: Any) -> None:
    facts = {"kv_role": "kv_both", "quant_description": {"enable_c8_quant": flag},
             "num_attention_heads": 32, "num_key_value_heads": 8}
    assert ok(outcome(None, kv_connector="MooncakeConnector", **facts)) == ok(
        outcome(None, kv_connector="MooncakeLayerwiseConnector", **facts))
    assert outcome(None, kv_connector="MooncakeConnector",
                   **{**facts, "quant_description": {"enable_c8_quant": True}}) == [
        "facts.kv_connector"]


def _nested_connector(depth: int, wrap_in_list: bool = False) -> dict[str, Any]:
    """The connector name in a mapping ``depth`` levels below kv_connector_extra_config."""
    value: Any = {"kv_connector": "MooncakeConnector"}
    for level in range(depth):
        # with lists, every other level is a list; the outermost level is always a mapping
        value = [value] if wrap_in_list and (depth - level) % 2 == 0 else {"inner": value}
    return dict(value)


# Our bound on the recursive search (the reference searches without one): 8 levels down.
@pytest.mark.parametrize(("depth", "found"), [(0, True), (7, True), (8, True), (9, False)])
@pytest.mark.parametrize("lists", [False, True])
def test_mooncake_search_depth(depth: int, found: bool, lists: bool) -> None:
    result = outcome(None, kv_role="kv_both", kv_connector="MultiConnector",
                     kv_connector_extra_config=_nested_connector(depth, lists),
                     quant_description={"enable_c8_quant": True}, num_attention_heads=32,
                     num_key_value_heads=8)
    if found:
        assert result == ["facts.kv_connector"]
    else:
        assert ok(result).pd_tp_ratio == 1


def test_mooncake_name_counts_only_under_kv_connector() -> None:
    extra = {"connectors": [{"name": "MooncakeConnector"}, {"kv_connector": "LMCacheConnector"}]}
    cfg = ok(outcome(None, kv_role="kv_both", kv_connector="MultiConnector",
                     kv_connector_extra_config=extra, quant_description={"enable_c8_quant": True},
                     num_attention_heads=32, num_key_value_heads=8))
    assert cfg.pd_tp_ratio == 1


# --- 2.4 EPLB environment switches (MRV1 needs one; MRV2 refuses both) ---------------------

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


# --- 2.4 rl_config and batch invariance: weight NZ forced to 0, warning only if it was not --

@pytest.mark.parametrize(("mode", "warns"), [(0, False), (1, True), (2, True)])
def test_rl_forces_nz_off(mode: int, warns: bool) -> None:
    cfg = ok(outcome({"rl_config": {"enabled": True}, "weight_nz_mode": mode}))
    assert cfg.weight_nz_mode == 0
    expected = (f"rl_config.enabled sets weight_nz_mode to 0 (was {mode})",) if warns else ()
    assert cfg.warnings == expected


@pytest.mark.parametrize(("mode", "warns"), [(0, False), (1, True), (2, True)])
def test_batch_invariance_forces_nz_off(mode: int, warns: bool) -> None:
    cfg = ok(outcome({"weight_nz_mode": mode}, {"VLLM_BATCH_INVARIANT": "1"}))
    assert (cfg.weight_nz_mode, cfg.batch_invariant) == (0, True)
    expected = (f"batch invariance sets weight_nz_mode to 0 (was {mode})",) if warns else ()
    assert cfg.warnings == expected
