"""Rules that depend on the model: KV NZ, sparse C8, sparse KV offload, PD heads, Mooncake."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ascend_config.rules.context import RuleContext

MOONCAKE_CONNECTORS = frozenset({"MooncakeConnector", "MooncakeConnectorV1"})
LI_C8_SUFFIXES = (".indexer.quant_type", ".indexer.wq_b_weight")
LI_C8_TYPES = frozenset({"INT8_DYNAMIC", "W8A8_MXFP8"})
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")
_EXTRA = "facts.kv_connector_extra_config"


def check_dump(ctx: RuleContext) -> None:
    """dump_config and dump_config_path exclude each other."""
    if ctx.opts.dump_config is not None and ctx.opts.dump_config_path is not None:
        ctx.problem("dump_config_path", ctx.opts.dump_config_path,
                    "null when dump_config is given", "dump_config and dump_config_path are "
                    "mutually exclusive")


def check_kv_nz(ctx: RuleContext) -> None:
    """NZ KV cache: DeepSeek MLA (not SFA) on a PD decode node."""
    if not ctx.opts.enable_kv_nz:
        return
    facts = ctx.facts
    if not facts.use_mla or facts.uses_sfa:
        ctx.problem("enable_kv_nz", True, "false unless the model is DeepSeek MLA without SFA",
                    "KV NZ supports DeepSeek MLA models only")
    if facts.kv_role != "kv_consumer":
        ctx.problem("enable_kv_nz", True, "false unless kv_role is kv_consumer",
                    f"only for the decode node of a PD deployment (kv_role {facts.kv_role})")


def check_sparse_c8(ctx: RuleContext) -> None:
    """C8 switches only count for SFA models; LI-C8 layers come from the quant description."""
    sfa = ctx.facts.uses_sfa
    li_c8 = ctx.opts.enable_sparse_li_c8 and sfa
    ctx.set_top(
        enable_sparse_sfa_c8=ctx.opts.enable_sparse_sfa_c8 and sfa,
        enable_sparse_li_c8=li_c8,
        c8_enable_reshape_optim=ctx.opts.c8_enable_reshape_optim and li_c8,
    )
    names: set[str] = set()
    ids: set[int] = set()
    has_filter = False
    for key, value in (ctx.facts.quant_description or {}).items():
        key = str(key)
        if not key.endswith(LI_C8_SUFFIXES):
            continue
        has_filter = True
        if value in LI_C8_TYPES:
            layer = key[: key.rindex(".indexer.")]
            names.add(layer)
            match = _LAYER_INDEX.search(layer)
            if match:
                ids.add(int(match.group(1)))
    ctx.derived.update(sparse_li_c8_layer_filter=has_filter,
                       sparse_li_c8_layer_names=tuple(sorted(names)),
                       sparse_li_c8_layer_ids=tuple(sorted(ids)))


def check_sparse_kv_offload(ctx: RuleContext) -> None:
    """Sparse KV offload: SFA models without compress ratios, no CP/PP/MRV2, decode node."""
    cfg = ctx.opts.sparse_kv_offload_config
    if not cfg.enabled:
        return
    facts, path = ctx.facts, "sparse_kv_offload_config.enabled"
    if facts.has_compress_ratios:
        ctx.problem(path, True, "false for models with compress_ratios",
                    "compressed-attention models are not supported")
    if facts.index_topk is None:
        ctx.problem(path, True, "false for models without index_topk",
                    "needs an SFA sparse-attention model")
    elif cfg.topk_buffer_size < facts.index_topk:
        ctx.problem("sparse_kv_offload_config.topk_buffer_size", cfg.topk_buffer_size,
                    f"an integer >= index_topk ({facts.index_topk})", "buffer smaller than top-k")
    cp = facts.prefill_context_parallel_size * facts.decode_context_parallel_size
    if cp > 1:
        ctx.problem(path, True, "false with context parallel", f"PCP*DCP is {cp}, must be 1")
    if facts.pipeline_parallel_size > 1:
        ctx.problem(path, True, "false with pipeline parallel",
                    f"pipeline_parallel_size is {facts.pipeline_parallel_size}, must be 1")
    if facts.use_model_runner_v2:
        ctx.problem(path, True, "false on model runner v2", "model runner v1 only")
    if cfg.keep_device_kv_cache:
        ctx.warn("sparse_kv_offload_config.keep_device_kv_cache is for debugging only")
    elif facts.kv_role != "kv_consumer":
        ctx.problem(path, True, "true only on a kv_consumer node (or keep_device_kv_cache)",
                    f"offload runs on PD decode nodes (kv_role {facts.kv_role})")
    if ctx.opts.enable_sparse_sfa_c8:
        ctx.problem(path, True, "false with enable_sparse_sfa_c8",
                    "not implemented together with SFA C8")


def _positive_int(ctx: RuleContext, section: Mapping[str, Any], role: str, key: str) -> int:
    value = section.get(key, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        ctx.problem(f"{_EXTRA}.{role}.{key}", value, "an integer > 0",
                    "PD parallel sizes must be positive integers")
        return 1
    return value


def check_pd_heads(ctx: RuleContext) -> None:
    """Prefill/decode TP sizes from the connector's extra config: ratios and local sizes."""
    facts = ctx.facts
    if facts.kv_role is None:
        return
    extra = facts.kv_connector_extra_config
    sizes: dict[str, dict[str, int]] = {}
    for role in ("prefill", "decode"):
        section = extra.get(role, {})
        if not isinstance(section, Mapping):
            ctx.problem(f"{_EXTRA}.{role}", section, "a JSON object with tp_size and dp_size",
                        "must be a JSON object")
            section = {}
        sizes[role] = {k: _positive_int(ctx, section, role, k) for k in ("tp_size", "dp_size")}
        sizes[role]["given_tp"] = int("tp_size" in section)
        sizes[role]["given_dp"] = int("dp_size" in section)
    local_role = {"kv_producer": "prefill", "kv_consumer": "decode"}.get(facts.kv_role)
    if local_role:
        for key, local in (("tp_size", facts.tensor_parallel_size),
                           ("dp_size", facts.data_parallel_size)):
            if sizes[local_role][f"given_{key[:2]}"] and sizes[local_role][key] != local:
                ctx.problem(f"{_EXTRA}.{local_role}.{key}", sizes[local_role][key],
                            f"{local} (this node's {key[:2].upper()} size)",
                            f"must match the local {key[:2].upper()} on a {facts.kv_role}")
    if facts.use_mla:
        return
    prefill, decode = sizes["prefill"]["tp_size"], sizes["decode"]["tp_size"]
    if prefill % decode:
        ctx.problem(f"{_EXTRA}.prefill.tp_size", prefill,
                    f"a multiple of the decode tp_size ({decode})", "PD TP sizes do not divide")
        return
    ratio = prefill // decode
    derived = {"pd_tp_ratio": ratio, "pd_head_ratio": 1, "num_head_replica": 1}
    if ratio > 1:
        heads = facts.num_key_value_heads
        if heads <= 0:
            ctx.problem("facts.num_key_value_heads", heads, "an integer > 0",
                        "needed to split KV heads between prefill and decode TP")
        else:
            derived["num_head_replica"] = prefill // heads if prefill >= heads else 1
            derived["pd_head_ratio"] = min(prefill, heads) // min(decode, heads)
    ctx.derived.update(derived)


def _connector_names(value: object, depth: int = 0) -> Iterator[str]:
    if depth > 8:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "kv_connector" and isinstance(item, str):
                yield item
            yield from _connector_names(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _connector_names(item, depth + 1)


def check_mooncake_c8(ctx: RuleContext) -> None:
    """C8 KV with a GQA model cannot use the (non-layerwise) Mooncake connector."""
    facts = ctx.facts
    quant = facts.quant_description or {}
    if facts.kv_role is None or quant.get("enable_c8_quant") is not True:
        return
    if facts.use_mla or facts.num_attention_heads == facts.num_key_value_heads:
        return
    names = [facts.kv_connector or "", *_connector_names(facts.kv_connector_extra_config)]
    found = next((n for n in names if n in MOONCAKE_CONNECTORS), None)
    if found:
        ctx.problem("facts.kv_connector", found, "MooncakeLayerwiseConnector with C8 KV",
                    "producer keeps bf16 KV while the consumer expects int8 (C8, GQA model)")


def check_training_consistency(ctx: RuleContext) -> None:
    """The FA3 backend behind training consistency supports plain attention only."""
    rl = ctx.opts.rl_config
    if rl.enabled and rl.enable_training_consistency and (ctx.facts.use_mla or
                                                           ctx.facts.index_topk is not None):
        ctx.problem("rl_config.enable_training_consistency", True,
                    "false for MLA and SFA models", "the FA3 backend does not support MLA/SFA")
