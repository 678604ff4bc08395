"""Every numeric rule of graphs, scheduling and models (xlite, profiling chunk, DyntraLB, sparse
KV offload, PD ratios, Mooncake C8, RL) at, just below and just above its limit.

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
