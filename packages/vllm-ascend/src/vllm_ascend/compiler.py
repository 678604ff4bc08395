"""``AscendCompiler``: vLLM's CompilerInterface over the ascend-graph compile pipeline.

Used on the NPU platform (``get_compile_backend``): the fusion passes of the platform pass
manager (installed by vLLM under ``pass_key``), then the NPU graph extension when enabled,
else eager. The cache hash covers everything that changes the output, fusion settings
included; nothing is stored on the compiler by ``compute_hash``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from vllm.compilation.compiler_interface import CompilerInterface

logger = logging.getLogger("vllm_ascend.compiler")

PASS_KEY = "graph_fusion_manager"


def graph_backend(ascend_config: Any, cudagraph_mode: Any) -> str:
    """``npugraph_ex`` when enabled and graphs are captured, else ``eager``."""
    enabled = bool(ascend_config.ascend_compilation_config.enable_npugraph_ex)
    captures = cudagraph_mode is not None and getattr(cudagraph_mode, "name", "NONE") != "NONE"
    return "npugraph_ex" if enabled and captures else "eager"


class AscendCompiler(CompilerInterface):
    """Compile vLLM's piecewise graphs with the Ascend passes and backend."""

    name = "AscendCompiler"

    def __init__(self) -> None:
        self.cache_dir: str | None = None
        self.disable_cache = False
        self.prefix = ""
        self.backend = "eager"

    def initialize_cache(
        self, cache_dir: str, disable_cache: bool = False, prefix: str = ""
    ) -> None:
        self.cache_dir, self.disable_cache, self.prefix = cache_dir, disable_cache, prefix

    def compute_hash(self, vllm_config: Any) -> str:
        import ascend_config
        from ascend_graph import compute_hash
        from vllm.platforms import current_platform

        from vllm_ascend.config_pipeline.facts import extract_facts
        from vllm_ascend.config_pipeline.resolve_step import additional_config_of
        from vllm_ascend.pass_manager import build_fusion_manager

        soc = str(getattr(current_platform, "soc", "A2"))
        facts = extract_facts(vllm_config, soc)
        resolved = ascend_config.resolve(additional_config_of(vllm_config), facts=facts)
        cc = resolved.ascend_compilation_config
        self.backend = graph_backend(resolved, vllm_config.compilation_config.cudagraph_mode)
        manager = build_fusion_manager(cc, soc, facts)
        return str(compute_hash(
            manager, backend=self.backend,
            enable_npugraph_ex=self.backend == "npugraph_ex",
            enable_static_kernel=bool(cc.enable_static_kernel),
        ))[:10]

    def compile(
        self,
        graph: Any,
        example_inputs: list[Any],
        compiler_config: dict[str, Any],
        compile_range: Any,
        key: str | None = None,
    ) -> tuple[Any, Any]:
        from ascend_graph import compile_graph

        manager = compiler_config.get(PASS_KEY)
        fusion = getattr(manager, "fusion", manager)
        if fusion is None:
            raise RuntimeError(
                f"AscendCompiler needs the platform pass manager under {PASS_KEY!r} in the "
                "compiler config; is the NPU platform active?"
            )
        # Compilation may rewrite the graph in place; vLLM keeps using the original.
        graph = copy.deepcopy(graph)
        compiled = compile_graph(
            graph, example_inputs, manager=fusion, backend=self.backend,
            compile_range=compile_range,
        )
        return compiled, None  # no cache handle: vLLM recompiles on a cold start

    def load(self, handle: Any, graph: Any, example_inputs: list[Any], graph_index: int,
             compile_range: Any) -> Any:
        raise NotImplementedError("AscendCompiler does not save compiled artifacts")
