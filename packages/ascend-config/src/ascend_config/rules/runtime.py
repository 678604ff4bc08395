"""Rules for how the engine runs: graph compilation and xlite, the Ascend scheduler policies and
their placement in PD deployments, RL rollout effects and batch invariance (returned as
effective values and env changes).
"""

from __future__ import annotations

from ascend_config.rules.context import RuleContext

_COMP = "ascend_compilation_config"


def check_compilation(ctx: RuleContext) -> None:
    """Static kernel needs npugraph_ex; 310P and eager mode turn both off."""
    comp = ctx.opts.ascend_compilation_config
    if comp.enable_static_kernel and not comp.enable_npugraph_ex:
        ctx.problem(f"{_COMP}.enable_static_kernel", True,
                    "false unless ascend_compilation_config.enable_npugraph_ex is true",
                    "the static kernel needs npugraph_ex")
        return
    reason = None
    if ctx.facts.soc == "310P":
        reason = "is not supported on 310P"
    elif ctx.facts.enforce_eager:
        reason = "has no effect with enforce_eager (no graph mode)"
    if reason is None:
        return
    for key in ("enable_npugraph_ex", "enable_static_kernel"):
        if getattr(comp, key):
            if ctx.is_given(f"{_COMP}.{key}"):
                ctx.warn(f"{_COMP}.{key} {reason}; it is set to false")
            ctx.set_in(_COMP, **{key: False})


def check_xlite(ctx: RuleContext) -> None:
    """Xlite: at most one speculative token, no pipeline parallel; block size 128 advised."""
    if not ctx.opts.xlite_graph_config.enabled:
        return
    facts = ctx.facts
    if facts.speculative_method and facts.num_speculative_tokens != 1:
        ctx.problem("xlite_graph_config.enabled", True,
                    "false when speculative decoding uses more than 1 token",
                    f"xlite supports num_speculative_tokens 1 only "
                    f"(deployment has {facts.num_speculative_tokens})")
    if facts.pipeline_parallel_size > 1:
        ctx.problem("xlite_graph_config.enabled", True, "false with pipeline parallel > 1",
                    f"xlite does not support pipeline parallel "
                    f"(pipeline_parallel_size {facts.pipeline_parallel_size})")
    if facts.block_size != 128:
        ctx.warn(f"xlite_graph_config.enabled: block_size {facts.block_size} is not 128; "
                 f"xlite is tuned for 128 (larger sizes are reduced to 128)")


_S = "scheduler_config"


def check_profiling_chunk(ctx: RuleContext) -> None:
    """need_timing follows enabled; enabled needs PP > 1, no balance scheduling."""
    chunk = ctx.opts.scheduler_config.profiling_chunk_config
    path = f"{_S}.profiling_chunk_config"
    need_timing = chunk.enabled if chunk.need_timing is None else chunk.need_timing
    if need_timing and not chunk.enabled:
        ctx.warn(f"{path}.need_timing has no effect while profiling chunk is disabled; "
                 "it is set to false")
        need_timing = False
    updates: dict[str, object] = {"need_timing": need_timing}
    if chunk.enabled:
        facts = ctx.facts
        if facts.max_num_batched_tokens < chunk.min_chunk:
            ctx.warn(f"{path}.min_chunk {chunk.min_chunk} exceeds max_num_batched_tokens "
                     f"{facts.max_num_batched_tokens}; it is clamped to "
                     f"{facts.max_num_batched_tokens}")
            updates["min_chunk"] = facts.max_num_batched_tokens
        if facts.pipeline_parallel_size <= 1:
            ctx.problem(f"{path}.enabled", True, "true only with pipeline_parallel_size > 1",
                        f"profiling chunk needs pipeline parallel (pipeline_parallel_size "
                        f"{facts.pipeline_parallel_size})")
        if ctx.opts.scheduler_config.enable_balance_scheduling:
            ctx.problem(f"{path}.enabled", True, "false with balance scheduling",
                        "cannot be combined with enable_balance_scheduling")
    ctx.set_in(_S, profiling_chunk_config=chunk.model_copy(update=updates))


def check_scheduler_roles(ctx: RuleContext) -> None:
    """Balance, short-request-first, DyntraLB and recompute versus kv role, vLLM's scheduling
    policy and DP layout, and each other."""
    sched = ctx.opts.scheduler_config
    role, facts = ctx.kv_role, ctx.facts
    chunk_on = sched.profiling_chunk_config.enabled
    if sched.enable_balance_scheduling and role in ("kv_producer", "kv_consumer"):
        ctx.problem(f"{_S}.enable_balance_scheduling", True,
                    "true only without kv transfer or with kv_both",
                    f"balance scheduling does not support kv_role {role}")
    srf = sched.short_request_first_config
    if srf.enabled:
        path = f"{_S}.short_request_first_config.enabled"
        if sched.batch_job_sched_config.enabled:
            ctx.problem(path, True, "false with batch_job_sched_config.enabled",
                        "cannot be combined with batch-job scheduling")
        if chunk_on:
            ctx.problem(path, True, "false with profiling_chunk_config.enabled",
                        "cannot be combined with profiling chunk")
        if role == "kv_consumer":
            ctx.problem(path, True, "false on a kv_consumer node",
                        "not supported on a PD decode node")
        if facts.scheduler_policy != "fcfs":
            ctx.problem(path, True, "true only with vLLM's scheduling policy fcfs",
                        f"short-request-first reorders an fcfs queue; vLLM's scheduling "
                        f"policy is {facts.scheduler_policy!r} (use --scheduling-policy fcfs)")
    dyn = sched.dyntra_lb_config
    if dyn.enabled:
        path = f"{_S}.dyntra_lb_config.enabled"
        if sched.enable_balance_scheduling:
            ctx.problem(path, True, "false with balance scheduling",
                        "cannot be combined with enable_balance_scheduling")
        if role != "kv_consumer":
            ctx.problem(path, True, "true only on a kv_consumer node",
                        f"DyntraLB runs on PD decode nodes (kv_role {role})")
        if facts.data_parallel_size <= 1:
            ctx.problem(path, True, "true only with data_parallel_size > 1",
                        f"needs DP > 1 (data_parallel_size {facts.data_parallel_size})")
        if facts.nnodes_within_dp != 1:
            ctx.problem(path, True, "true only when each DP replica runs on one node "
                        "(nnodes_within_dp 1)",
                        f"DyntraLB balances DP replicas within one node; a replica here spans "
                        f"{facts.nnodes_within_dp} nodes")
        if chunk_on:
            ctx.problem(path, True, "false with profiling_chunk_config.enabled",
                        "cannot be combined with profiling chunk")
    if sched.recompute_scheduler_enable:
        path = f"{_S}.recompute_scheduler_enable"
        if role == "kv_producer":
            ctx.warn(f"{path}: the recompute scheduler runs on decode nodes only; it is "
                     "disabled on this kv_producer node")
            ctx.set_in(_S, recompute_scheduler_enable=False)
        elif role != "kv_consumer":
            ctx.problem(path, True, "true only on a kv_consumer (PD decode) node",
                        f"recompute scheduler needs kv_role kv_consumer (got {role})")


ALLOC_CONF = "PYTORCH_NPU_ALLOC_CONF"


def strip_expandable_segments(value: str | None) -> str | None:
    """Drop comma-separated entries starting exactly with ``expandable_segments:``."""
    if value is None:
        return None
    kept = [p for p in value.split(",") if not p.strip().startswith("expandable_segments:")]
    return ",".join(kept) or None


def apply_rl(ctx: RuleContext) -> None:
    """rl_config.enabled: NZ off, expandable segments off, dev mode on, refresh on."""
    rl = ctx.opts.rl_config
    if not rl.enabled:
        return
    ctx.set_top(refresh=True)
    if ctx.opts.weight_nz_mode != 0:
        ctx.warn(f"rl_config.enabled sets weight_nz_mode to 0 (was {ctx.opts.weight_nz_mode})")
        ctx.set_top(weight_nz_mode=0)
    ctx.set_env("VLLM_ASCEND_ENABLE_NZ", "0")
    current = ctx.env_text(ALLOC_CONF)
    stripped = strip_expandable_segments(current)
    if stripped != current:
        ctx.set_env(ALLOC_CONF, stripped)
    if rl.enable_batch_invariant:
        ctx.set_env("VLLM_BATCH_INVARIANT", "1")
    ctx.set_env("VLLM_SERVER_DEV_MODE", "1")


def apply_batch_invariance(ctx: RuleContext) -> None:
    """Batch invariance (from rl_config or VLLM_BATCH_INVARIANT): NZ off, deterministic HCCL."""
    rl = ctx.opts.rl_config
    from_rl = rl.enabled and rl.enable_batch_invariant
    on = from_rl or bool(ctx.env("VLLM_BATCH_INVARIANT"))
    ctx.derived["batch_invariant"] = on
    if not on:
        return
    if ctx.opts.weight_nz_mode != 0:
        ctx.warn(f"batch invariance sets weight_nz_mode to 0 (was {ctx.opts.weight_nz_mode})")
        ctx.set_top(weight_nz_mode=0)
    ctx.set_env("HCCL_DETERMINISTIC", "strict")
    ctx.set_env("LCCL_DETERMINISTIC", "1")
