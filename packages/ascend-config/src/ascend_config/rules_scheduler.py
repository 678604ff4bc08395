"""Rules for the Ascend scheduler policies and their placement in PD deployments."""

from __future__ import annotations

from ascend_config.rule_context import RuleContext

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
