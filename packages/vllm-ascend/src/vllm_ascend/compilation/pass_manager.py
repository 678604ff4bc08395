"""The platform pass manager: vLLM's post-grad manager plus the engine's fusion passes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.compilation.passes.utility.fix_functionalization import FixFunctionalizationPass
from vllm.compilation.passes.vllm_inductor_pass import VllmInductorPass

from vllm_ascend.engine import AscendEngine, engine_of
from vllm_ascend.engine.fusion_manager import (  # noqa: F401 - re-exported names
    build_fusion_manager,
    sequence_parallel_ops,
    warn_missed_sites,
)
from vllm_ascend.engine.registry import peek_engine

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

# Ops vLLM's FixFunctionalizationPass names; the CPU build of vLLM lacks some of them.
_FIXUP_OPS = ("rotary_embedding", "fused_add_rms_norm", "fused_add_rms_norm_static_fp8_quant",
              "rms_norm_dynamic_per_token_quant", "rms_norm", "rms_norm_static_fp8_quant")

def vllm_fixup_ops_available() -> bool:
    """Whether every op vLLM's functionalization fix-up refers to exists in this vLLM build."""
    ops = getattr(torch.ops, "_C", None)
    return ops is not None and all(hasattr(ops, name) for name in _FIXUP_OPS)


class SafeFixFunctionalizationPass(FixFunctionalizationPass):
    """vLLM's functionalization fix-up where its ops exist, else inductor's own decomposition."""
    # vLLM's fix-up names a CUDA-only op; inductor's decomposition is correct (a few more copies).

    def __call__(self, graph: torch.fx.Graph) -> None:
        if vllm_fixup_ops_available():
            super().__call__(graph)


# HF model types whose attention layers apply RMS norms to q and k before the rotary embedding:
# qknorm_rope applies to every attention layer of these models.
QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe"})


def qk_norm_model_type(vllm_config: Any) -> str | None:
    """The model type when the model normalises q and k before rope, else None."""
    model_config = getattr(vllm_config, "model_config", None)
    model_type = getattr(getattr(model_config, "hf_config", None), "model_type", None)
    return model_type if model_type in QK_NORM_MODEL_TYPES else None


class AscendFusionPass(VllmInductorPass):
    """ascend-graph's GraphFusionPassManager as one vLLM inductor pass (timed, dumpable)."""

    def __init__(self, config: Any, fusion: Any, lowering: str | None = None) -> None:
        super().__init__(config)
        self.fusion = fusion
        self.lowering = lowering
        self.qk_norm_model = qk_norm_model_type(config)

    @VllmInductorPass.time_and_log  # type: ignore[arg-type]
    def __call__(self, graph: torch.fx.Graph) -> None:
        from vllm.compilation.passes.inductor_pass import get_pass_context

        # Passes with token bounds apply only when the graph's compile range lies inside them.
        self.fusion(graph, get_pass_context().compile_range)
        self.check_model_expectations(graph)

    def check_model_expectations(self, graph: torch.fx.Graph) -> None:
        """Flag a q/k-norm model's graph with rope but no qknorm_rope candidate (the idiom
        changed)."""
        rope = self.fusion.last_sites.get("qknorm_rope")
        if self.qk_norm_model is None or rope is None or rope.expected or rope.matched:
            return
        first = next((n for n in graph.nodes if n.op == "call_function"
                      and any(word in str(n.target) for word in ("rotary", "rope"))), None)
        if first is not None:
            warn_missed_sites("qknorm_rope", (
                f"Ascend fusion pass qknorm_rope applies to this {self.qk_norm_model} model "
                f"(RMS norms on q and k before the rotary embedding) but found no candidate "
                f"site in a graph; matching stopped at node {first.name!r} ({first.target}): "
                f"its q/k inputs are not RMS norm outputs the pass recognises"))

    def is_applicable_for_range(self, compile_range: Any) -> bool:
        return bool(self.fusion.is_applicable_for_range(compile_range))

    def uuid(self) -> str:
        # The fusion settings and inductor's lowering of the ascend ops change the output, so
        # they are part of the compile-cache key.
        return self.hash_dict({"source": self.hash_source(self), "fusion": self.fusion.uuid(),
                               "lowering": self.lowering})


def register_cpu_lowerings() -> str:
    """Have inductor inline the ``torch.ops.ascend.*`` ops after the passes (host CPU); a
    fingerprint."""
    from ascend_kernels.inductor_lowering import lowering_fingerprint, register_inductor_lowerings

    register_inductor_lowerings()
    return str(lowering_fingerprint())


class AscendPassManager(PostGradPassManager):
    """PostGradPassManager running the Ascend fusion passes before vLLM's cleanup/lowering."""

    def __init__(self) -> None:
        super().__init__()
        self.fusion: Any = None
        self.soc = "cpu"
        self.engine: AscendEngine | None = None

    def __call__(self, graph: Any) -> None:
        from vllm.compilation.passes.inductor_pass import get_pass_context

        self.note_run(get_pass_context().compile_range)
        super().__call__(graph)

    def note_run(self, compile_range: Any) -> None:
        """Count one run of the passes in the engine's ready watch (after ready: logged or
        refused)."""
        if self.engine is not None:
            self.engine.ready.note(
                "pass_runs", f"passes run for compile range {compile_range} (a new shape)")

    def configure(self, config: VllmConfig) -> None:
        super().configure(config)
        self.engine = engine_of(config)
        self.soc = self.engine.soc
        self.fusion = self.engine.fusion
        lowering = register_cpu_lowerings() if self.soc == "cpu" else None
        self.add(AscendFusionPass(config, self.fusion, lowering))
        self.fix_functionalization = SafeFixFunctionalizationPass(config)

    @property
    def counts(self) -> dict[str, int]:
        """Sites rewritten per ascend-graph pass by this engine's fusion manager (cumulative)."""
        return dict(self.fusion.counts) if self.fusion is not None else {}


def fusion_report(vllm_config: VllmConfig) -> dict[str, int]:
    """Sites rewritten per pass by the engine of ``vllm_config``; {} before it compiled."""
    engine = peek_engine(vllm_config)
    if engine is None or not engine.fusion_built:
        return {}
    return {name: int(count) for name, count in engine.fusion.counts.items()}


def fusion_sites(vllm_config: VllmConfig) -> dict[str, Any]:
    """Candidate ("expected") and rewritten ("matched") sites per pass of the engine's graphs.

    ``ascend_ops`` counts ``ascend.*`` calls before the first pass; ``from_cache`` marks graphs
    loaded, not compiled (zero sites are no misses); ``expected`` is None without candidates.
    """
    from vllm.compilation.counter import compilation_counter

    engine = peek_engine(vllm_config)
    built = engine is not None and engine.fusion_built
    passes: dict[str, dict[str, int | None]] = {}
    ascend_ops: dict[str, int] = {}
    graphs = 0
    if engine is not None and built:
        fusion = engine.fusion
        graphs = int(fusion.graphs_run)
        ascend_ops = {name: int(count) for name, count in fusion.ascend_ops.items()}
        for name, site in fusion.sites.items():
            expected = site["expected"]
            passes[name] = {"expected": None if expected is None else int(expected),
                            "matched": int(site["matched"] or 0)}
    loaded = int(compilation_counter.num_compiled_artifacts_loaded
                 + compilation_counter.num_aot_artifacts_loaded)
    return {"passes": passes, "graphs": graphs, "ascend_ops": ascend_ops,
            "loaded_artifacts": loaded,
            "from_cache": loaded > 0 or (built and graphs == 0)}
