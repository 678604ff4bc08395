"""``check_and_update_config`` as small steps: each module holds one step of the pipeline.

facts -> resolve -> gpu_fixes -> compilation -> selection -> allocator_env -> derived_edits.
``steps.run_npu_pipeline`` and ``steps.run_cpu_pipeline`` put them in order; the facts
(``base.facts``) and the resolution (``process.resolve_step``) sit in lower layers, where the
engine and the process owner use them too.
"""
