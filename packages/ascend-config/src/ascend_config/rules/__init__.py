"""The cross-field and deployment rules ``resolve`` runs, in the order it runs them.

Each rule is a function of the :class:`~ascend_config.rules.context.RuleContext` of one
``resolve`` call: it reads the typed options and the facts, and reports problems, warnings,
environment changes and the effective values it forces there.
"""

from __future__ import annotations

from collections.abc import Callable

from ascend_config.rules import model, parallel, runtime
from ascend_config.rules.context import RuleContext

Rule = Callable[[RuleContext], None]

# Order matters where a rule reads an effective value another one sets (rl_config last).
RULES: tuple[Rule, ...] = (
    runtime.check_compilation,
    runtime.check_xlite,
    parallel.check_finegrained_tp,
    parallel.check_mc2,
    parallel.check_reduce_sample,
    parallel.check_eplb,
    parallel.check_cpu_binding,
    runtime.check_profiling_chunk,
    runtime.check_scheduler_roles,
    model.check_dump,
    model.check_kv_nz,
    model.check_sparse_c8,
    model.check_sparse_kv_offload,
    model.check_pd_heads,
    model.check_mooncake_c8,
    model.check_training_consistency,
    runtime.apply_rl,
    runtime.apply_batch_invariance,
)
