"""``AscendEngine``: everything the Ascend plugin holds for one engine (one VllmConfig).

Built once per VllmConfig (``engine.registry``): the resolved Ascend config, the SoC, the
deployment facts, and the engine's stores (its ready watch, capture tally, compile-cache loads,
forward state, graph parameters) and the fusion manager that the platform pass manager and
the NPU compile backend share. It refers to its VllmConfig weakly: the registry drops an engine
when its config is freed, and the engine's watch then removes its Dynamo callbacks.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_ascend.base.forward_context import AscendForwardState
from vllm_ascend.engine.capture_tally import CaptureTally
from vllm_ascend.engine.fusion_manager import build_fusion_manager
from vllm_ascend.engine.norm_quant_gate import quant_description_of
from vllm_ascend.engine.ready_watch import ReadyWatch
from vllm_ascend.engine.warm_start import CacheLoads

if TYPE_CHECKING:
    from ascend_config import AscendConfig, DeploymentFacts
    from ascend_graph import GraphFusionPassManager, GraphParamsStore
    from vllm.config import VllmConfig


def new_graph_params(vllm_config: VllmConfig) -> GraphParamsStore:
    """An engine's graph-parameter store with every kind it captures: ``main``, plus ``draft``
    and ``draft_prefill`` with speculative decoding, for its capture sizes."""
    from ascend_graph import GraphParamsStore

    store = GraphParamsStore()
    cc = getattr(vllm_config, "compilation_config", None)
    sizes = list(getattr(cc, "cudagraph_capture_sizes", None) or [])
    store.set("main", sizes)
    if getattr(vllm_config, "speculative_config", None) is not None:
        store.set("draft", sizes)
        store.set("draft_prefill", sizes)
    return store


@dataclass(eq=False)
class AscendEngine:
    """One engine's Ascend state; get it with :func:`vllm_ascend.engine.engine_of`.

    ``config``: the resolved Ascend config (never resolved again for this engine); ``soc``: the
    SoC it was resolved for (``A2``, ``A3``, ``A5``, ``310P`` or ``cpu``); ``facts``: the
    deployment facts it was resolved with. ``ready``, ``captures`` and ``cache_loads`` are the
    engine's stores; ``graph_wrappers`` holds (weakly) the static-graph wrappers built for it,
    which the NPU runner's graph-memory profile points at a pool of its own; ``fusion``,
    ``graphs`` and ``forward`` are built on first use from the engine's VllmConfig, which the
    engine refers to weakly (``vllm_config_ref``).
    """

    config: AscendConfig
    soc: str
    facts: DeploymentFacts
    vllm_config_ref: Callable[[], VllmConfig | None] = field(repr=False)
    ready: ReadyWatch = field(default_factory=ReadyWatch)
    captures: CaptureTally = field(default_factory=CaptureTally)
    cache_loads: CacheLoads = field(default_factory=CacheLoads)
    graph_wrappers: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet, repr=False)
    _fusion: GraphFusionPassManager | None = field(default=None, repr=False)
    _graphs: GraphParamsStore | None = field(default=None, repr=False)
    _forward: AscendForwardState | None = field(default=None, repr=False)

    @property
    def vllm_config(self) -> VllmConfig:
        """The engine's VllmConfig (``RuntimeError`` once it was freed)."""
        found = self.vllm_config_ref()
        if found is None:
            raise RuntimeError("the engine's VllmConfig was freed")
        return found

    @property
    def fusion(self) -> GraphFusionPassManager:
        """The fusion manager of this engine (built once, from the resolved pass switches, the
        facts and the model's quantization): the pass manager runs it, the compile backend
        hashes and reloads with it, and its counts are the engine's fusion report."""
        if self._fusion is None:
            vllm_config = self.vllm_config
            self._fusion = build_fusion_manager(
                self.config.ascend_compilation_config, self.soc, self.facts,
                sequence_parallel=bool(vllm_config.parallel_config.use_sequence_parallel_moe),
                quant_description=quant_description_of(vllm_config, self.facts),
                log_decisions=True,
            )
        return self._fusion

    @property
    def fusion_built(self) -> bool:
        """Whether :attr:`fusion` was built (reading it would build it)."""
        return self._fusion is not None

    @property
    def graphs(self) -> GraphParamsStore:
        """The graph-parameter store of this engine (main, draft, draft-prefill models)."""
        if self._graphs is None:
            self._graphs = new_graph_params(self.vllm_config)
        return self._graphs

    @property
    def forward(self) -> AscendForwardState:
        """The inputs of this engine's Ascend forward fields (MoE decision, MC2 budget)."""
        if self._forward is None:
            self._forward = AscendForwardState.from_vllm_config(self.vllm_config, self.facts)
        return self._forward

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Work of this engine on this thread (a worker's load, profile, warm-up, execute and
        sample steps): the Dynamo compiles inside are this engine's (``ready``, installed on
        first use)."""
        self.ready.install()
        with self.ready.watching():
            yield

    def mark_ready(self, on_after_ready: Callable[[], None] | None = None) -> ReadyWatch:
        """Mark the engine ready (a worker calls it once ``compile_or_warm_up_model`` is done),
        strict as the config's ``forbid_compile_after_ready`` says; returns the watch."""
        from vllm.compilation.counter import compilation_counter

        self.ready.install()
        aot = int(compilation_counter.num_aot_compiles)
        # vLLM times the model's compile (AOT or not); only an AOT compile escaped the callbacks.
        cc = self.vllm_config.compilation_config
        seconds = float(cc.compilation_time) if aot else 0.0
        self.ready.mark_ready(
            strict=bool(self.config.ascend_compilation_config.forbid_compile_after_ready),
            on_after_ready=on_after_ready, aot=(aot, seconds))
        return self.ready

    def close(self) -> None:
        """Remove what the engine registered outside itself (its watch's Dynamo callbacks)."""
        self.ready.uninstall()
