"""``AscendCompiler``: vLLM's CompilerInterface over the ascend-graph compile pipeline (NPU).

Caching saves each piecewise graph's fused ATen graph (and npugraph_ex's code) as checksummed
entries; ``load`` reruns the saved graph instead of the passes. A missing or stale artifact is
one info "cache miss", a damaged one a warning; both compile again.
"""
# The cache dir passes the root rule at every use (opened again per load, save and lookup), so a
# root swapped after initialize_cache is never read; one that fails turns caching off.

from __future__ import annotations

import copy
import hashlib
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.compilation.compiler_interface import CompilerInterface

from vllm_ascend.base.trusted_paths import TrustedDir, make_private_dir, open_trusted_dir
from vllm_ascend.compilation.compile_cache import (
    artifact_path,
    check_key,
    encode_entry,
    parse_handle,
    read_code,
    read_fused,
)
from vllm_ascend.engine import AscendEngine, engine_of
from vllm_ascend.process.process_setup import current_process_setup

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

PASS_KEY = "graph_fusion_manager"
NPU_CODE_SUFFIX = ".npugraph_ex.py"


# Graph modes whose graphs npugraph_ex may build: whole-forward graphs. The reference plugin
# disables npugraph_ex (and the static kernel) for every mode that needs piecewise compilation
# (PIECEWISE, FULL_AND_PIECEWISE; in its ``_setup_compile_backend``); so does this one.
NPUGRAPH_EX_MODES = ("FULL", "FULL_DECODE_ONLY")


def graph_backend(ascend_config: Any, cudagraph_mode: Any) -> str:
    """``npugraph_ex`` when enabled and the graph mode captures whole forwards, else ``eager``."""
    enabled = bool(ascend_config.ascend_compilation_config.enable_npugraph_ex)
    name = getattr(cudagraph_mode, "name", cudagraph_mode)
    return "npugraph_ex" if enabled and name in NPUGRAPH_EX_MODES else "eager"


@dataclass(frozen=True)
class StaticKernelPlan:
    """npugraph_ex's static-shape kernels: on or off, their decode batch sizes,
    ``LOCAL_WORLD_SIZE``."""

    enabled: bool = False
    decode_batch_sizes: tuple[int, ...] = ()
    local_world_size: int = 1

    @classmethod
    def from_vllm_config(cls, vllm_config: Any, enabled: bool) -> StaticKernelPlan:
        from ascend_graph import decode_batch_sizes

        if not enabled:
            return cls()
        cc, par = vllm_config.compilation_config, vllm_config.parallel_config
        spec = vllm_config.speculative_config
        sizes = decode_batch_sizes(
            cc.cudagraph_capture_sizes or [],
            int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0,
            int(vllm_config.scheduler_config.max_num_seqs),
        )
        local = int(par.local_world_size) * int(par.data_parallel_size_local or 1)
        return cls(True, tuple(sizes), local)

    def apply_environment(self, environ: Any = None) -> str | None:
        """Set ``LOCAL_WORLD_SIZE`` unless already set; the value set, or None."""
        env = os.environ if environ is None else environ
        if not self.enabled or "LOCAL_WORLD_SIZE" in env:
            return None
        env["LOCAL_WORLD_SIZE"] = str(self.local_world_size)
        logger.info("LOCAL_WORLD_SIZE=%d for the static kernel (local world size x local DP "
                    "size)", self.local_world_size)
        return env["LOCAL_WORLD_SIZE"]


def _return_tuple(graph: Any) -> bool:
    """Make ``graph`` return a tuple (aot_autograd needs one); True if it already did."""
    output = next(n for n in reversed(graph.graph.nodes) if n.op == "output")
    if isinstance(output.args[0], (tuple, list)):
        return True
    output.args = ((output.args[0],),)
    graph.recompile()
    return False


@dataclass
class _CodeNotes:
    """What one npugraph_ex compile said about its code: made (code, why none), loaded."""

    made: list[tuple[str | None, str | None]] = field(default_factory=list)
    loaded: list[str | None] = field(default_factory=list)

    def hear(self, code: str | None, why: str | None) -> None:
        self.made.append((code, why))


class AscendCompiler(CompilerInterface):
    """Compile vLLM's piecewise graphs with the Ascend passes and backend."""
    # fusion_manager is set by the constructor, compute_hash and every compile (latest wins): vLLM
    # calls load without the compiler config.

    name = "AscendCompiler"

    def __init__(self, fusion_manager: Any = None) -> None:
        self.cache_dir: str | None = None
        self.disable_cache = False
        self.prefix = ""
        self.backend = "eager"
        self.fusion_manager = fusion_manager
        self.trusted = False
        self.static_kernel = StaticKernelPlan()
        self.pass_manager: Any = None
        self.engine: AscendEngine | None = None

    def initialize_cache(self, cache_dir: str, disable_cache: bool = False,
                         prefix: str = "") -> None:
        """Use ``cache_dir`` for artifacts (0700); one failing the root rule turns caching off."""
        self.cache_dir, self.disable_cache, self.prefix = cache_dir, disable_cache, prefix
        self.trusted = False
        if disable_cache or not cache_dir:
            return
        try:
            make_private_dir(cache_dir)
        except OSError as exc:
            self._refuse(exc)
            return
        self.trusted = True

    def _refuse(self, exc: OSError) -> None:
        self.trusted = False
        current_process_setup().warn_once(
            f"AscendCompiler compile cache off: {exc} (nothing is read from or written to "
            f"{self.cache_dir})", logger)

    def _open_cache(self) -> TrustedDir | None:
        """The cache dir checked now and held open, or None (caching off, one warning per
        process)."""
        if not self.caching:
            return None
        assert self.cache_dir is not None
        try:
            return open_trusted_dir(self.cache_dir)
        except OSError as exc:
            self._refuse(exc)
            return None

    @property
    def caching(self) -> bool:
        return bool(self.cache_dir) and not self.disable_cache and self.trusted

    def compute_hash(self, vllm_config: VllmConfig) -> str:
        """The cache hash of the engine of ``vllm_config``: its resolved config and fusion
        manager."""
        from ascend_graph import compute_hash

        engine = engine_of(vllm_config)
        cc = engine.config.ascend_compilation_config
        self.backend = graph_backend(engine.config,
                                     vllm_config.compilation_config.cudagraph_mode)
        self.static_kernel = StaticKernelPlan.from_vllm_config(
            vllm_config, bool(cc.enable_static_kernel) and self.backend == "npugraph_ex"
        )
        # The engine's one manager: AscendPassManager.configure takes it too; load uses it.
        self.engine = engine
        self.fusion_manager = engine.fusion
        return str(compute_hash(
            engine.fusion, backend=self.backend,
            enable_npugraph_ex=self.backend == "npugraph_ex",
            enable_static_kernel=self.static_kernel.enabled,
            decode_batch_sizes=self.static_kernel.decode_batch_sizes,
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
        self.pass_manager = manager if hasattr(manager, "note_run") else None
        if self.pass_manager is not None and self.pass_manager.engine is not None:
            self.engine = self.pass_manager.engine
        if not self.caching:
            return self._compile(graph, example_inputs, fusion, compile_range)[0], None
        if key is None:  # vLLM always passes one; direct callers may not
            key = "ascend_fused_" + hashlib.sha256(
                f"{graph.code}{compile_range}".encode()).hexdigest()[:24]
        check_key(key)
        compiled, fused = self._compile(graph, example_inputs, fusion, compile_range, key=key)
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
        cache = self._open_cache()
        if cache is not None:
            with cache:
                saved = read_fused(cache, key, manager=fusion, backend=self.backend,
                                   compile_range=compile_range)
        compiled: Any = None
        fused = None
        if saved is not None:
            saved_code = self._saved_code(key)
            try:
                compiled, fused = self._compile(graph, example_inputs, fusion, compile_range,
                                                key=key, reuse=saved, saved_code=saved_code)
            except Exception as exc:  # a saved graph must never stop the engine
                logger.info("AscendCompiler cache miss for %s (the saved graph failed: %r); "
                            "compiling again", path, exc)
            else:
                if fused.reused:
                    self._count_load()
                    return compiled
                logger.info("AscendCompiler cache miss for %s (graph %d differs from the "
                            "saved one); compiled again", path, graph_index)
        if fused is None:
            compiled, fused = self._compile(graph, example_inputs, fusion, compile_range,
                                            key=key)
        if self.caching:
            self._save(fused, fusion, compile_range, key)  # the next start hits again
        return compiled

    def _count_load(self) -> None:
        """Count a reused artifact for the warm-start line of the engine being compiled (if any)."""
        from vllm.config import get_current_vllm_config_or_none

        current = get_current_vllm_config_or_none()
        engine = engine_of(current) if current is not None else self.engine
        if engine is not None and self.cache_dir:
            engine.cache_loads.add(self.cache_dir)

    def _saved_code(self, key: str) -> str | None:
        """npugraph_ex's code saved with the artifact ``key``, if it checks out."""
        if self.backend != "npugraph_ex":
            return None
        cache = self._open_cache()
        if cache is None:
            return None
        with cache:
            return read_code(cache, key + NPU_CODE_SUFFIX)

    def _compile(self, graph: Any, example_inputs: list[Any], fusion: Any, compile_range: Any,
                 *, key: str | None = None, reuse: Any = None,
                 saved_code: str | None = None) -> tuple[Any, Any]:
        from ascend_graph import NpuGraphOptions, compile_graph_fused

        if self.pass_manager is not None:  # the platform pass manager counts the run
            self.pass_manager.note_run(compile_range)
        # Compilation may rewrite the graph in place; vLLM keeps using the original.
        graph = copy.deepcopy(graph)
        returns_tuple = _return_tuple(graph)
        options = None
        code = _CodeNotes()
        caching_code = self.caching and key is not None
        if self.backend == "npugraph_ex":
            plan = self.static_kernel
            plan.apply_environment()
            options = NpuGraphOptions(
                static_kernel=plan.enabled, decode_batch_sizes=plan.decode_batch_sizes,
                on_code=code.hear if caching_code else None,
                saved_code=saved_code, on_load=code.loaded.append,
            )
        compiled, fused = compile_graph_fused(
            graph, example_inputs, manager=fusion, backend=self.backend,
            compile_range=compile_range, npu_options=options, reuse=reuse,
        )
        if options is not None and caching_code:
            assert key is not None
            self._keep_code(key, code)
        if returns_tuple:
            return compiled, fused
        return (lambda *args: compiled(*args)[0]), fused

    def _keep_code(self, key: str, notes: _CodeNotes) -> None:
        """Save npugraph_ex's generated code, or log why there is none."""
        # Process-local Triton kernels are expected (info); other reasons warn once per process.
        path = artifact_path(self.cache_dir, key + NPU_CODE_SUFFIX)
        for why in notes.loaded:
            if why is None:
                logger.info("npugraph_ex code loaded from %s (not compiled again)", path)
            else:
                logger.info("npugraph_ex code in %s not used: %s", path, why)
        if notes.loaded == [None]:
            return
        reasons = [why for code, why in notes.made if code is None and why is not None]
        for code, _ in notes.made:
            if code is not None:
                self._write(key + NPU_CODE_SUFFIX, code.encode("utf-8"))
        if not notes.made:
            reasons = ["the extension never called _NpuFxCompiler._get_compiled_gm"]
        if not reasons:
            return
        cache = self._open_cache()
        if cache is not None:
            with cache:  # an old file must not pass for this graph's code
                cache.unlink(key + NPU_CODE_SUFFIX)
        reason = "; ".join(dict.fromkeys(reasons))
        if "Triton" in reason:
            logger.info("npugraph_ex code for %s not saved: %s; the fused graph is saved and "
                        "reused", path, reason)
            return
        current_process_setup().warn_once(
            f"npugraph_ex code not saved in the compile cache: {reason}; the fused graph is "
            "saved and reused", logger)

    def _write(self, name: str, data: bytes) -> bool:
        """Write checksummed entry ``name`` in the cache dir, checked now; False (one warning) if
        refused."""
        cache = self._open_cache()
        if cache is None:
            return False
        with cache:
            try:
                cache.write_atomic(name, encode_entry(data))
            except OSError as exc:
                logger.warning("AscendCompiler could not write %s (%s); not cached",
                               cache.path / name, exc)
                return False
        return True

    def _save(self, fused: Any, fusion: Any, compile_range: Any, key: str) -> Any:
        from ascend_graph import FusedGraphError, dumps_fused_graph

        path = artifact_path(self.cache_dir, key)
        try:
            data = dumps_fused_graph(fused, manager=fusion, backend=self.backend,
                                     compile_range=compile_range)
        except FusedGraphError as exc:
            logger.info("AscendCompiler does not cache %s: %s", path, exc)
            return None
        return (key, str(path)) if self._write(key, data) else None
