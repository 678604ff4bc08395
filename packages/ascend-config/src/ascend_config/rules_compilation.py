"""Rules for graph compilation and xlite."""

from __future__ import annotations

from ascend_config.rule_context import RuleContext

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
