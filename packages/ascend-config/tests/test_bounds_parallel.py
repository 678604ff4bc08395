"""Every numeric parallelism rule (MC2, MegaMoE, fine-grained TP, EPLB) at, just below and just
above its limit.

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
