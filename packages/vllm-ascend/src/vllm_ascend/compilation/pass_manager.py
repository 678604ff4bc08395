"""The platform pass manager: vLLM's post-grad manager plus ascend-graph's fusion passes.

vLLM instantiates :class:`AscendPassManager` (``get_pass_manager_cls``), calls ``configure``
and installs it under the platform's ``pass_key``. ``configure`` resolves the Ascend config
with the same pure ``resolve`` as the platform and builds ascend-graph's
``GraphFusionPassManager`` from ``ascend_compilation_config``. On CPU, vLLM's
functionalization fix-up (which names a CUDA-only fused op) is replaced by a safe variant, and
inductor is given lowerings that inline the ``torch.ops.ascend.*`` ops (see
:func:`register_cpu_lowerings`).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.compilation.passes.utility.fix_functionalization import FixFunctionalizationPass
from vllm.compilation.passes.vllm_inductor_pass import VllmInductorPass

logger = logging.getLogger("vllm_ascend.compilation.pass_manager")

# Ops vLLM's FixFunctionalizationPass names; the CPU build of vLLM lacks some of them.
_FIXUP_OPS = ("rotary_embedding", "fused_add_rms_norm", "fused_add_rms_norm_static_fp8_quant",
              "rms_norm_dynamic_per_token_quant", "rms_norm", "rms_norm_static_fp8_quant")

class LivePassManagers(weakref.WeakSet["AscendPassManager"]):
    """The pass managers alive in this process, for the fusion report (held by the process
    setup)."""


def _live() -> LivePassManagers:
    from vllm_ascend.runtime.process_setup import current_process_setup

    return current_process_setup().state(LivePassManagers)


def vllm_fixup_ops_available() -> bool:
    """Whether every op vLLM's functionalization fix-up refers to exists in this vLLM build."""
    ops = getattr(torch.ops, "_C", None)
    return ops is not None and all(hasattr(ops, name) for name in _FIXUP_OPS)


class SafeFixFunctionalizationPass(FixFunctionalizationPass):
    """vLLM's fix-up where its ops exist; otherwise leaves ``auto_functionalized`` nodes to
    inductor's own decomposition (correct, at most a few extra copies)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        if vllm_fixup_ops_available():
            super().__call__(graph)


class AscendFusionPass(VllmInductorPass):
    """ascend-graph's GraphFusionPassManager as one vLLM inductor pass (timed, dumpable)."""

    def __init__(self, config: Any, fusion: Any, lowering: str | None = None) -> None:
        super().__init__(config)
        self.fusion = fusion
        self.lowering = lowering

    @VllmInductorPass.time_and_log  # type: ignore[arg-type]
    def __call__(self, graph: torch.fx.Graph) -> None:
        from vllm.compilation.passes.inductor_pass import get_pass_context

        # Passes with token bounds apply only when the graph's compile range lies inside them.
        self.fusion(graph, get_pass_context().compile_range)

    def is_applicable_for_range(self, compile_range: Any) -> bool:
        return bool(self.fusion.is_applicable_for_range(compile_range))

    def uuid(self) -> str:
        # The fusion settings and inductor's lowering of the ascend ops change the output, so
        # they are part of the compile-cache key.
        return self.hash_dict({"source": self.hash_source(self), "fusion": self.fusion.uuid(),
                               "lowering": self.lowering})


def register_cpu_lowerings() -> str:
    """Have inductor inline the ``torch.ops.ascend.*`` ops it meets after the passes (host CPU:
    inductor generates the kernels there); returns the lowerings' fingerprint for the cache key.

    Graphs at pass time, and inductor's dumps of them, still hold the ascend ops; the generated
    code runs their decompositions fused with the neighbouring ops instead of one Python
    reference call per op.
    """
    from ascend_kernels.inductor_lowering import lowering_fingerprint, register_inductor_lowerings

    register_inductor_lowerings()
    return str(lowering_fingerprint())


def sequence_parallel_ops() -> tuple[Any, Any] | None:
    """vLLM's all-gather and sequence-parallel chunk op handles, when this build has both."""
    import vllm.model_executor.models.utils  # noqa: F401  (registers sequence_parallel_chunk_impl)

    ops = getattr(torch.ops, "vllm", None)
    try:
        return (ops.all_gather.default, ops.sequence_parallel_chunk_impl.default)  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):
        return None


def build_fusion_manager(
    switches: Any, soc: str, facts: Any, *, sequence_parallel: bool = False,
    quant_description: Any = None, log_decisions: bool = False,
) -> Any:
    """ascend-graph's manager for the resolved pass switches and model facts.

    The all-gather/chunk cleanup runs only with sequence parallelism, and only when vLLM
    provides both op handles it matches (they are passed in: ascend-graph never imports vLLM).
    norm_quant follows ``norm_quant_gate`` (W4A4 layers, model dtype). kv_cache_attention gets
    vLLM's attention op handles and the fused op (:mod:`vllm_ascend.ops.attention_kv`),
    registered here so every process that compiles or loads such a graph has it.
    """
    from ascend_graph import GraphFusionPassManager

    from vllm_ascend.compilation import norm_quant_gate
    from vllm_ascend.ops.attention_kv import attention_op_handles
    from vllm_ascend.runtime.process_setup import current_process_setup

    norm_quant = norm_quant_gate.decide_norm_quant(
        bool(switches.fuse_norm_quant), soc, str(facts.dtype), quant_description)
    if log_decisions:  # one line per distinct decision in this process
        current_process_setup().log_once(norm_quant.reason, norm_quant_gate.logger, logging.INFO)

    scale = facts.routed_scaling_factor if facts.routed_scaling_factor != 1.0 else None
    handles = sequence_parallel_ops() if sequence_parallel else None
    kv_attention = bool(switches.fuse_kv_cache_attention)
    return GraphFusionPassManager(
        fuse_norm_quant=norm_quant.enabled,
        w4a4=norm_quant.w4a4,
        fuse_qknorm_rope=bool(switches.fuse_qknorm_rope),
        fuse_muls_add=bool(switches.fuse_muls_add),
        muls_add_scale=scale,
        soc=soc,
        sequence_parallel=handles is not None,
        allgather_op=handles[0] if handles else None,
        chunk_op=handles[1] if handles else None,
        fuse_kv_cache_attention=kv_attention,
        attention_ops=attention_op_handles() if kv_attention else None,
    )


class AscendPassManager(PostGradPassManager):
    """PostGradPassManager running the Ascend fusion passes before vLLM's cleanup/lowering."""

    def __init__(self) -> None:
        super().__init__()
        self.fusion: Any = None
        self.soc = "cpu"
        self.vllm_config: Any = None
        _live().add(self)

    def __call__(self, graph: Any) -> None:
        from vllm.compilation.passes.inductor_pass import get_pass_context

        self.note_run(get_pass_context().compile_range)
        super().__call__(graph)

    def note_run(self, compile_range: Any) -> None:
        """Count one run of the passes (one backend compile of a graph for ``compile_range``)
        in the engine's ready watch; after ready it is logged, or an error in strict mode."""
        if self.vllm_config is None:
            return
        from vllm_ascend.compilation.ready_watch import ready_watch_for

        ready_watch_for(self.vllm_config).note(
            "pass_runs", f"passes run for compile range {compile_range} (a new shape)")

    def configure(self, config: Any) -> None:
        import ascend_config
        from vllm.platforms import current_platform

        from vllm_ascend.config_pipeline.facts import extract_facts
        from vllm_ascend.config_pipeline.resolve_step import additional_config_of
        from vllm_ascend.runtime.config_channel import ascend_environ
        from vllm_ascend.runtime.process_setup import current_process_setup

        super().configure(config)
        self.vllm_config = config
        self.soc = str(getattr(current_platform, "soc", "cpu"))
        facts = extract_facts(config, self.soc)
        # The engine's resolved config (resolved once: by this process's platform hook, or
        # published to this worker); only a pass manager outside any engine resolves its own.
        resolved = current_process_setup().config_for(config)
        if resolved is None:
            resolved = ascend_config.resolve(additional_config_of(config), facts=facts,
                                             environ=ascend_environ())
        sequence_parallel = bool(config.parallel_config.use_sequence_parallel_moe)
        from vllm_ascend.compilation.norm_quant_gate import quant_description_of

        self.fusion = build_fusion_manager(
            resolved.ascend_compilation_config, self.soc, facts,
            sequence_parallel=sequence_parallel,
            quant_description=quant_description_of(config, facts), log_decisions=True,
        )
        lowering = register_cpu_lowerings() if self.soc == "cpu" else None
        self.add(AscendFusionPass(config, self.fusion, lowering))
        self.fix_functionalization = SafeFixFunctionalizationPass(config)

    @property
    def counts(self) -> dict[str, int]:
        """Sites rewritten per ascend-graph pass by this manager (cumulative)."""
        return dict(self.fusion.counts) if self.fusion is not None else {}


def fusion_report() -> dict[str, int]:
    """Sites rewritten per pass name, summed over the pass managers alive in this process."""
    total: dict[str, int] = {}
    for manager in list(_live()):
        for name, count in manager.counts.items():
            total[name] = total.get(name, 0) + int(count)
    return total
