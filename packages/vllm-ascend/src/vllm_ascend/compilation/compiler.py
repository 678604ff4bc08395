"""``AscendCompiler``: vLLM's CompilerInterface over the ascend-graph compile pipeline.

Used on the NPU platform (``get_compile_backend``): the fusion passes of the platform pass
manager (installed by vLLM under ``pass_key``), then the NPU graph extension when enabled,
else eager. The cache hash covers everything that changes the output, fusion settings
included.

Compile cache: with caching on, ``compile`` saves the fused ATen graph of every piecewise
graph as ``<cache_dir>/<key>`` and returns the handle ``(key, path)``; ``load`` rebuilds it,
derives the ATen graph of ``graph`` again (cheap; keeps torch's handling of aliased and
mutated tensors exact) and runs the saved fused graph instead of the passes. A missing,
damaged or stale artifact is one info "cache miss" and a normal compile; an artifact that
could have been planted by someone else (untrusted location, foreign owner, or not signed with
this user's key, see ``compile_cache``) is one warning naming the file, then a normal compile.
A cache dir that is not trusted disables the cache with one warning. On npugraph_ex the
extension's generated code is also saved, as ``<key>.npugraph_ex.py``, unless it calls
process-local Triton kernels; it is for inspection only, since the extension's own loader is
not public (the saved fused graph is what ``load`` uses).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from typing import Any

from vllm.compilation.compiler_interface import CompilerInterface

from vllm_ascend.compilation.artifact_signing import ArtifactSigner, load_signer
from vllm_ascend.compilation.compile_cache import (
    artifact_path,
    check_key,
    parse_handle,
    read_fused,
    write_atomic,
)
from vllm_ascend.runtime.trusted_paths import make_private_dir

logger = logging.getLogger("vllm_ascend.compilation.compiler")

PASS_KEY = "graph_fusion_manager"
NPU_CODE_SUFFIX = ".npugraph_ex.py"


def graph_backend(ascend_config: Any, cudagraph_mode: Any) -> str:
    """``npugraph_ex`` when enabled and graphs are captured, else ``eager``."""
    enabled = bool(ascend_config.ascend_compilation_config.enable_npugraph_ex)
    captures = cudagraph_mode is not None and getattr(cudagraph_mode, "name", "NONE") != "NONE"
    return "npugraph_ex" if enabled and captures else "eager"


def _return_tuple(graph: Any) -> bool:
    """Make ``graph`` return a tuple (aot_autograd needs one); True if it already did."""
    output = next(n for n in reversed(graph.graph.nodes) if n.op == "output")
    if isinstance(output.args[0], (tuple, list)):
        return True
    output.args = ((output.args[0],),)
    graph.recompile()
    return False


class AscendCompiler(CompilerInterface):
    """Compile vLLM's piecewise graphs with the Ascend passes and backend.

    ``fusion_manager`` is the ascend-graph pass manager ``load`` checks artifacts against and
    recompiles with (vLLM calls ``load`` without the compiler config). The constructor,
    ``compute_hash`` (built from the config, as the platform pass manager is) and every
    ``compile`` (the one vLLM installed) set it; the latest wins.
    """

    name = "AscendCompiler"

    def __init__(self, fusion_manager: Any = None) -> None:
        self.cache_dir: str | None = None
        self.disable_cache = False
        self.prefix = ""
        self.backend = "eager"
        self.fusion_manager = fusion_manager
        self.signer: ArtifactSigner | None = None

    def initialize_cache(
        self, cache_dir: str, disable_cache: bool = False, prefix: str = "",
        cache_root: str | None = None,
    ) -> None:
        """Use ``cache_dir`` for artifacts, signed with the key under ``cache_root`` (default:
        vLLM's ``VLLM_CACHE_ROOT``); an untrusted location turns caching off with one warning."""
        self.cache_dir, self.disable_cache, self.prefix = cache_dir, disable_cache, prefix
        self.signer = None
        if disable_cache or not cache_dir:
            return
        if cache_root is None:
            from vllm import envs

            cache_root = envs.VLLM_CACHE_ROOT
        try:
            make_private_dir(cache_dir)
            self.signer = load_signer(cache_root)
        except OSError as exc:
            logger.warning("AscendCompiler compile cache off: %s (nothing is read from or "
                           "written to %s)", exc, cache_dir)

    @property
    def caching(self) -> bool:
        return bool(self.cache_dir) and not self.disable_cache and self.signer is not None

    def compute_hash(self, vllm_config: Any) -> str:
        import ascend_config
        from ascend_graph import compute_hash
        from vllm.platforms import current_platform

        from vllm_ascend.compilation.pass_manager import build_fusion_manager
        from vllm_ascend.config_pipeline.facts import extract_facts
        from vllm_ascend.config_pipeline.resolve_step import additional_config_of

        soc = str(getattr(current_platform, "soc", "A2"))
        facts = extract_facts(vllm_config, soc)
        resolved = ascend_config.resolve(additional_config_of(vllm_config), facts=facts)
        cc = resolved.ascend_compilation_config
        self.backend = graph_backend(resolved, vllm_config.compilation_config.cudagraph_mode)
        # The same manager AscendPassManager.configure builds; load recompiles with it.
        sequence_parallel = bool(vllm_config.parallel_config.use_sequence_parallel_moe)
        manager = build_fusion_manager(cc, soc, facts, sequence_parallel=sequence_parallel)
        self.fusion_manager = manager
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
        manager = compiler_config.get(PASS_KEY)
        fusion = getattr(manager, "fusion", manager)
        if fusion is None:
            raise RuntimeError(
                f"AscendCompiler needs the platform pass manager under {PASS_KEY!r} in the "
                "compiler config; is the NPU platform active?"
            )
        self.fusion_manager = fusion
        if not self.caching:
            return self._compile(graph, example_inputs, fusion, compile_range)[0], None
        if key is None:  # vLLM always passes one; direct callers may not
            key = "ascend_fused_" + hashlib.sha256(
                f"{graph.code}{compile_range}".encode()).hexdigest()[:24]
        check_key(key)
        compiled, fused = self._compile(graph, example_inputs, fusion, compile_range,
                                        code_key=key + NPU_CODE_SUFFIX)
        return compiled, self._save(fused, fusion, compile_range, key)

    def load(self, handle: Any, graph: Any, example_inputs: list[Any], graph_index: int,
             compile_range: Any) -> Any:
        key, saved_path = parse_handle(handle)
        fusion = self.fusion_manager
        if fusion is None:
            raise RuntimeError(
                "AscendCompiler.load needs the fusion pass manager: call compute_hash("
                "vllm_config) or compile first, or pass AscendCompiler(fusion_manager=...)"
            )
        path = artifact_path(self.cache_dir, key, saved_path)
        saved = None
        if self.signer is not None:
            saved = read_fused(path, signer=self.signer, manager=fusion, backend=self.backend,
                               compile_range=compile_range)
        compiled: Any = None
        fused = None
        if saved is not None:
            try:
                compiled, fused = self._compile(graph, example_inputs, fusion, compile_range,
                                                reuse=saved)
            except Exception as exc:  # a saved graph must never stop the engine
                logger.info("AscendCompiler cache miss for %s (the saved graph failed: %r); "
                            "compiling again", path, exc)
            else:
                if fused.reused:
                    return compiled
                logger.info("AscendCompiler cache miss for %s (graph %d differs from the "
                            "saved one); compiled again", path, graph_index)
        if fused is None:
            compiled, fused = self._compile(graph, example_inputs, fusion, compile_range)
        if self.caching:
            self._save(fused, fusion, compile_range, key)  # the next start hits again
        return compiled

    def _compile(self, graph: Any, example_inputs: list[Any], fusion: Any, compile_range: Any,
                 *, reuse: Any = None, code_key: str | None = None) -> tuple[Any, Any]:
        from ascend_graph import NpuGraphOptions, compile_graph_fused

        # Compilation may rewrite the graph in place; vLLM keeps using the original.
        graph = copy.deepcopy(graph)
        returns_tuple = _return_tuple(graph)
        options = None
        if self.backend == "npugraph_ex":
            code_dir = self.cache_dir if code_key else None
            if code_dir and code_key:  # an old file must not pass for this compile's code
                artifact_path(code_dir, code_key).unlink(missing_ok=True)
            options = NpuGraphOptions(cache_dir=code_dir, cache_key=code_key)
        compiled, fused = compile_graph_fused(
            graph, example_inputs, manager=fusion, backend=self.backend,
            compile_range=compile_range, npu_options=options, reuse=reuse,
        )
        if options is not None and options.cache_dir and code_key:
            self._check_code_saved(code_key)
        if returns_tuple:
            return compiled, fused
        return (lambda *args: compiled(*args)[0]), fused

    def _check_code_saved(self, code_key: str) -> None:
        path = artifact_path(self.cache_dir, code_key)
        if not path.exists():
            logger.info("npugraph_ex code for %s not saved: it calls process-local Triton "
                        "kernels (or the extension has no code hook); the fused graph is "
                        "saved and reused", path)

    def _save(self, fused: Any, fusion: Any, compile_range: Any, key: str) -> Any:
        from ascend_graph import FusedGraphError, dumps_fused_graph

        path = artifact_path(self.cache_dir, key)
        try:
            data = dumps_fused_graph(fused, manager=fusion, backend=self.backend,
                                     compile_range=compile_range)
            assert self.signer is not None  # _save runs only while caching
            write_atomic(path, self.signer.sign(data))
        except FusedGraphError as exc:
            logger.info("AscendCompiler does not cache %s: %s", path, exc)
            return None
        except OSError as exc:
            logger.warning("AscendCompiler could not write %s (%s); not cached", path, exc)
            return None
        return (key, str(path))
