"""The compile pipeline: Ascend passes on the ATen graph, then a backend.

Backends:
- `"eager"` (default): aot_autograd produces the functionalized ATen graph, the manager
  rewrites it, and it runs eagerly (the fused ops are ordinary `torch.ops.ascend` calls).
  A mutating custom op (vLLM's attention) is functionalized as `auto_functionalized`, the form
  vLLM's own compile gives its passes (`v1_functionalization`), never as
  `auto_functionalized_v2`: the passes (kv_cache_attention) match that form.
- `"inductor"`: inductor on CPU with the manager installed as its post-grad custom pass, so
  patterns see exactly what they see inside vLLM (post-grad graph, `view` as `reshape`).
- `"npugraph_ex"`: the NPU graph extension (see `ascend_graph.npu_graph_ex`), loaded lazily.

Run models under `torch.no_grad()`/`torch.inference_mode()`: with gradients the forward graph
keeps intermediates alive for the backward pass and the fusion patterns do not apply.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import Any, cast

import torch
from torch import fx

from ascend_graph.manager import GraphFusionPassManager
from ascend_graph.passes.base import CompileRange

BACKENDS = ("eager", "inductor", "npugraph_ex")
GraphHook = Callable[[fx.GraphModule], None]
CompiledFn = Callable[..., Any]


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; allowed: {', '.join(BACKENDS)}")
    return backend


def _dist_version(name: str) -> str | None:
    # Never import torch_npu here: on a host without CANN its import fails.
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def compute_hash(
    manager: GraphFusionPassManager | None = None,
    *,
    backend: str = "eager",
    enable_npugraph_ex: bool = False,
    enable_static_kernel: bool = False,
    decode_batch_sizes: Sequence[int] = (),
    extra: dict[str, Any] | None = None,
) -> str:
    """Compile-cache key factor: torch/torch_npu/ascend versions, the backend and its options,
    and every fusion setting (through `manager.uuid()`). Pure: stores nothing."""
    factors = {
        "torch": torch.__version__,
        "torch_npu": _dist_version("torch-npu"),
        "ascend_graph": _dist_version("ascend-graph"),
        "ascend_kernels": _dist_version("ascend-kernels"),
        "backend": check_backend(backend),
        "enable_npugraph_ex": bool(enable_npugraph_ex),
        "enable_static_kernel": bool(enable_static_kernel),
        "decode_batch_sizes": sorted(int(s) for s in decode_batch_sizes),
        "passes": None if manager is None else manager.uuid(),
        "extra": extra or {},
    }
    blob = json.dumps(factors, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def run_manager_on(
    gm: fx.GraphModule,
    manager: GraphFusionPassManager,
    compile_range: CompileRange = None,
    on_graph: GraphHook | None = None,
) -> fx.GraphModule:
    """Run the manager on `gm`'s graph in place and regenerate its code."""
    counts = manager.run(gm.graph, compile_range)
    if any(counts.values()):
        gm.graph.lint()
        gm.recompile()
    if on_graph is not None:
        on_graph(gm)
    return gm


def compile_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    manager: GraphFusionPassManager,
    backend: str = "eager",
    compile_range: CompileRange = None,
    npu_options: Any = None,
    on_graph: GraphHook | None = None,
) -> Callable[..., Any]:
    """Compile a Dynamo graph: ATen graph, Ascend passes, then `backend`.

    `on_graph` (optional) receives each graph right after the passes ran (debug dumps,
    tests counting fused nodes).
    """
    check_backend(backend)
    if backend == "inductor":
        return _compile_inductor(gm, example_inputs, manager, compile_range, on_graph)
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def forward_compiler(fw: fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
        fused = run_manager_on(fw, manager, compile_range, on_graph)
        return cast(CompiledFn, make_boxed_func(backend_callable(fused, inputs, backend,
                                                                  npu_options)))

    with v1_functionalization():
        return aot_autograd(fw_compiler=forward_compiler)(gm, list(example_inputs))


@contextlib.contextmanager
def v1_functionalization() -> Iterator[None]:
    """Functionalize mutating custom ops as `auto_functionalized` for the block. Torch's default
    is `auto_functionalized_v2` (`torch._inductor.config.enable_auto_functionalized_v2`, also
    read by aot_autograd outside inductor); vLLM turns it off in the inductor config of its own
    compile because its passes match v1 only, and so do this package's: without this an
    aot_autograd graph outside vLLM's inductor (the eager and npugraph_ex backends) would hold
    v2 calls the kv_cache_attention pass never matches."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(enable_auto_functionalized_v2=False):
        yield


def backend_callable(
    graph: fx.GraphModule, inputs: Sequence[Any], backend: str, npu_options: Any = None
) -> Callable[..., Any]:
    """Run a fused ATen graph on `backend` (`eager` or `npugraph_ex`). The graph is an
    aot_autograd forward graph, whose output is always a tuple, as the extension needs."""
    if backend == "eager":
        return graph.forward
    from ascend_graph.npu_graph_ex import NpuGraphOptions, npu_graph_compile

    options = npu_options if npu_options is not None else NpuGraphOptions()
    return npu_graph_compile(graph, inputs, options=options)


def inductor_pass(
    manager: GraphFusionPassManager,
    compile_range: CompileRange = None,
    on_graph: GraphHook | None = None,
) -> Any:
    """The manager as an inductor `CustomGraphPass` (uuid included in inductor's cache key)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class _AscendPostGradPass(CustomGraphPass):
        def __call__(self, graph: fx.Graph) -> None:
            manager.run(graph, compile_range)
            if on_graph is not None and isinstance(graph.owning_module, fx.GraphModule):
                on_graph(graph.owning_module)

        def uuid(self) -> str:
            return manager.uuid()

    return _AscendPostGradPass()


@contextlib.contextmanager
def _fresh_compile_caches() -> Iterator[None]:
    # A cache hit skips the post-grad passes (and so the report); compile for real.
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        yield


def _compile_inductor(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    manager: GraphFusionPassManager,
    compile_range: CompileRange,
    on_graph: GraphHook | None,
) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    patches = {"post_grad_custom_post_pass": inductor_pass(manager, compile_range, on_graph)}
    with _fresh_compile_caches():
        return cast(CompiledFn, compile_fx(gm, list(example_inputs), config_patches=patches))
