"""Rules for parallelism: fine-grained TP, MC2 variants, shared experts, EPLB, CPU binding."""

from __future__ import annotations

import os

from ascend_config.facts import DeploymentFacts
from ascend_config.rules.context import RuleContext

MAX_HIERARCHY_EXPERTS = 512
IRQ_MIN_CPUS_PER_NPU = 5  # 2 IRQ + main + acl + release
MEGAMOE_QUANT_TYPES = frozenset(
    {"w8a8", "w4a8", "w8a8_dynamic", "w4a8_dynamic", "quanttype.w8a8", "quanttype.w4a8"})
_FTP = "finegrained_tp_config"


def check_finegrained_tp(ctx: RuleContext) -> None:
    """Each enabled size: MoE model, divides DP; o_proj/olora/embedding placement limits."""
    ftp = ctx.opts.finegrained_tp_config
    facts = ctx.facts
    recompute = ctx.opts.scheduler_config.recompute_scheduler_enable
    for key, size in ftp.enabled_sizes().items():
        path = f"{_FTP}.{key}"
        if not facts.is_moe:
            ctx.problem(path, size, "0 for dense models", "fine-grained TP is for MoE models only")
        if facts.data_parallel_size % size:
            ctx.problem(path, size, f"a divisor of data_parallel_size "
                        f"({facts.data_parallel_size})", "must divide the DP size")
        if key in ("oproj_tensor_parallel_size", "olora_tensor_parallel_size"):
            if facts.enforce_eager:
                ctx.problem(path, size, "0 with enforce_eager", "needs graph mode")
            if facts.kv_role != "kv_consumer":
                ctx.problem(path, size, "0 unless kv_role is kv_consumer",
                            f"only on a PD decode node (kv_role {facts.kv_role})")
        if key == "oproj_tensor_parallel_size" and facts.tensor_parallel_size != 1:
            ctx.problem(path, size, "0 unless tensor_parallel_size is 1",
                        f"needs tensor_parallel_size 1 (deployment has "
                        f"{facts.tensor_parallel_size})")
        if key in ("oproj_tensor_parallel_size", "embedding_tensor_parallel_size") and (
            not recompute
        ):
            ctx.problem(path, size,
                        "0 unless scheduler_config.recompute_scheduler_enable is true",
                        "cross-DP collectives need the recompute scheduler's uniform tokens")


def megamoe_supported(facts: DeploymentFacts) -> bool:
    """Whether the model's shape and quantization fit the MegaMoE kernels."""
    hidden, inter = facts.hidden_size, facts.moe_intermediate_size
    if not (1024 <= hidden <= 8192 and hidden % 512 == 0):
        return False
    if not (1024 <= inter <= 3072 and inter % 512 == 0):
        return False
    quant = facts.quant_description or {}
    kind = quant.get("moe_quantize") or quant.get("quantize")
    return kind is None or str(kind).lower() in MEGAMOE_QUANT_TYPES


def check_mc2(ctx: RuleContext) -> None:
    """Fused MC2 limits, shared-expert DP and overlap effects, hierarchical MC2 limits."""
    opts, facts = ctx.opts, ctx.facts
    if opts.enable_fused_mc2 == 1:
        if any(a.startswith("MiniMaxM3") for a in facts.architectures):
            ctx.problem("enable_fused_mc2", 1, "0 for MiniMaxM3 models",
                        "fused MC2 does not support MiniMaxM3")
        elif facts.megamoe_available and not megamoe_supported(facts):
            ctx.warn("enable_fused_mc2: the model does not fit MegaMoE (hidden size 1024-8192 "
                     "and MoE intermediate size 1024-3072, multiples of 512; w8a8/w4a8); "
                     "fused MC2 is set to 0")
            ctx.set_top(enable_fused_mc2=0)
    shared_dp = (opts.enable_shared_expert_dp and facts.enable_expert_parallel
                 and facts.tensor_parallel_size > 1)
    ctx.set_top(enable_shared_expert_dp=shared_dp)
    if ctx.opts.enable_fused_mc2 == 1 and opts.multistream_overlap_shared_expert:
        ctx.warn("multistream_overlap_shared_expert is not supported with fused MC2; "
                 "it is set to false")
        ctx.set_top(multistream_overlap_shared_expert=False)
    if opts.enable_mc2_hierarchy_comm:
        _check_hierarchy(ctx)
    if opts.mix_placement and (shared_dp or ctx.opts.multistream_overlap_shared_expert):
        ctx.problem("mix_placement", True,
                    "false with enable_shared_expert_dp or multistream_overlap_shared_expert",
                    "mixed placement conflicts with shared-expert DP / multistream overlap")


def _check_hierarchy(ctx: RuleContext) -> None:
    facts, eplb = ctx.facts, ctx.opts.eplb_config
    path = "enable_mc2_hierarchy_comm"
    if facts.soc not in ("A2", "A3"):
        ctx.problem(path, True, "false unless soc is A2 or A3",
                    f"hierarchical MC2 is not implemented on {facts.soc}")
    redundant = eplb.num_redundant_experts if eplb.dynamic_eplb else 0
    total = facts.num_experts + redundant
    if total > MAX_HIERARCHY_EXPERTS:
        detail = (f"{total} experts ({facts.num_experts} logical experts + {redundant} EPLB "
                  f"redundant experts)" if redundant else f"{total} experts")
        ctx.problem(path, True, f"false with more than {MAX_HIERARCHY_EXPERTS} experts",
                    f"supports at most {MAX_HIERARCHY_EXPERTS} experts, got {detail}")
    if ctx.opts.enable_fused_mc2 == 1:
        ctx.problem(path, True, "false with enable_fused_mc2 1",
                    "hierarchical MC2 cannot be combined with fused MC2")


def check_reduce_sample(ctx: RuleContext) -> None:
    """Reduced sampling: experimental, not with lm_head TP, not on a prefill node."""
    if not ctx.opts.enable_reduce_sample:
        return
    ctx.warn("enable_reduce_sample is experimental")
    if ctx.opts.finegrained_tp_config.lmhead_tensor_parallel_size > 0:
        ctx.problem("enable_reduce_sample", True,
                    "false with finegrained_tp_config.lmhead_tensor_parallel_size > 0",
                    "cannot be combined with lm_head TP")
    if ctx.kv_role == "kv_producer":
        ctx.problem("enable_reduce_sample", True, "false on a kv_producer node",
                    "not supported on a PD prefill node")


def check_eplb(ctx: RuleContext) -> None:
    """EPLB: map files, record path, MRV1 env switch, MRV2 field limits, vLLM's own EPLB
    (``--enable-eplb``) only on model runner v2."""
    eplb = ctx.opts.eplb_config
    given = sorted(p.split(".", 1)[1] for p in ctx.given if p.startswith("eplb_config."))
    if eplb.expert_map_record_path is not None and not eplb.dynamic_eplb:
        ctx.set_in("eplb_config", dynamic_eplb=True)
    path = eplb.expert_map_path
    if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        ctx.problem("eplb_config.expert_map_path", path, "a readable .json file",
                    "file not found or not readable")
    dyn_env = ctx.env("DYNAMIC_EPLB") in ("true", "1")
    record_env = ctx.env("EXPERT_MAP_RECORD") in ("true", "1")
    if ctx.facts.use_model_runner_v2:
        if eplb.load_collection_phase != "all" and not ctx.facts.enable_eplb:
            ctx.problem("eplb_config.load_collection_phase", eplb.load_collection_phase,
                        "'all' unless vLLM's --enable-eplb is on",
                        "load collection feeds vLLM's EPLB, which is off")
        legacy = [k for k in given if k != "load_collection_phase"]
        if legacy:
            ctx.problem("eplb_config", ", ".join(legacy), "only load_collection_phase",
                        "model runner v2 uses vLLM's --enable-eplb; legacy EPLB fields given")
        for name, on in (("DYNAMIC_EPLB", dyn_env), ("EXPERT_MAP_RECORD", record_env)):
            if on:
                ctx.problem(f"env {name}", ctx.environ.get(name), "unset on model runner v2",
                            "model runner v1 control; use vLLM's --enable-eplb")
        return
    if "load_collection_phase" in given:
        ctx.problem("eplb_config.load_collection_phase", eplb.load_collection_phase,
                    "only with model runner v2", "not used by model runner v1")
    if ctx.facts.enable_eplb:
        ctx.problem("vllm --enable-eplb", True,
                    "only with model runner v2 (VLLM_USE_V2_MODEL_RUNNER=1)",
                    "on model runner v1 use eplb_config.dynamic_eplb instead")
    if ctx.opts.eplb_config.dynamic_eplb and not (dyn_env or ctx.env("EXPERT_MAP_RECORD") ==
                                                  "true"):
        ctx.problem("eplb_config.dynamic_eplb", True,
                    "true only with env DYNAMIC_EPLB=true (or EXPERT_MAP_RECORD=true)",
                    "dynamic EPLB on model runner v1 needs the DYNAMIC_EPLB switch")


def check_cpu_binding(ctx: RuleContext) -> None:
    """IRQ binding reserves two CPUs, so an explicit minimum must be at least five; A5 has no
    IRQ binding (the SoC default of None is decided by ascend-topology's planner)."""
    cfg = ctx.opts.cpu_binding_config
    if not cfg.bind_irq:
        return
    if ctx.facts.soc == "A5":
        if ctx.is_given("cpu_binding_config.bind_irq"):
            ctx.warn("cpu_binding_config.bind_irq: IRQ binding is not available on A5; it is "
                     "set to false")
        ctx.set_in("cpu_binding_config", bind_irq=False)
        return
    if cfg.min_cpus_per_npu is not None and cfg.min_cpus_per_npu < IRQ_MIN_CPUS_PER_NPU:
        ctx.problem("cpu_binding_config.min_cpus_per_npu", cfg.min_cpus_per_npu,
                    f"null or an integer >= {IRQ_MIN_CPUS_PER_NPU} with bind_irq",
                    "2 IRQ + main + acl + release CPUs")
