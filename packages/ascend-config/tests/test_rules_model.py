"""The rules that depend on the model (KV NZ, sparse C8, sparse KV offload, PD head ratios,
Mooncake C8, training consistency), each at, just below and just above its limit.

Expected values are the existing vllm-ascend plugin's rules, worked out by hand in each table
row; none is read back from the code.
"""

from __future__ import annotations

from typing import Any

import pytest

from .rule_outcomes import lines, ok, outcome


def test_sparse_kv_offload_with_sfa_c8_line() -> None:
    assert lines({"sparse_kv_offload_config": {"enabled": True}, "enable_sparse_sfa_c8": True},
                 index_topk=2048, kv_role="kv_consumer") == [
        "sparse_kv_offload_config.enabled: not implemented together with SFA C8 (given True; "
        "allowed: false with enable_sparse_sfa_c8)"]


SKO = {"sparse_kv_offload_config": {"enabled": True}}


SFA_D = {"index_topk": 2048, "kv_role": "kv_consumer"}


def _pd(prefill: Any, decode: Any, **facts: Any) -> dict[str, Any]:
    extra = {"prefill": {"tp_size": prefill}, "decode": {"tp_size": decode}}
    return {"kv_role": "kv_both", "kv_connector_extra_config": extra, **facts}


PREFILL_TP = "facts.kv_connector_extra_config.prefill.tp_size"


def _nested_connector(depth: int, wrap_in_list: bool = False) -> dict[str, Any]:
    """The connector name in a mapping ``depth`` levels below kv_connector_extra_config."""
    value: Any = {"kv_connector": "MooncakeConnector"}
    for level in range(depth):
        # with lists, every other level is a list; the outermost level is always a mapping
        value = [value] if wrap_in_list and (depth - level) % 2 == 0 else {"inner": value}
    return dict(value)


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


# Our bound on the recursive search (the existing plugin searches without one): 8 levels down.
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


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [p for p, _ in found]


C8 = {"quant_description": {"enable_c8_quant": True}, "num_attention_heads": 32,
      "num_key_value_heads": 8}


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
