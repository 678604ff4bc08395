"""RL rollout effects and batch invariance: returned as effective values and env changes."""

from __future__ import annotations

from ascend_config.rule_context import RuleContext

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
