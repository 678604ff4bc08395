"""Fused graphs that outlive the process: save what the passes produced, reuse it later.

`compile_graph_fused` is `compile_graph` for the `eager` and `npugraph_ex` backends that also
returns the fused ATen graph the backend runs (a `FusedGraph`). Given a `FusedGraph` from an
earlier compile (`reuse=`), it derives the ATen graph again with aot_autograd, so torch's
runtime handling of aliased and mutated tensors stays exact, and when that graph is the one
the saved graph was made from, the backend runs the saved graph and the passes are skipped;
otherwise the passes run as usual (`FusedGraph.reused` tells which).

`dumps_fused_graph`/`loads_fused_graph` turn a `FusedGraph` into bytes and back: a JSON
header (format, torch and ascend-graph versions, the manager's uuid, backend, compile range,
checksum) and the pickled GraphModule. FX pickles a GraphModule as its generated Python code,
which names the `torch.ops.ascend.*` ops directly, and traces that code again on load.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import hashlib
import json
import pickle
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import fx

from ascend_graph.manager import GraphFusionPassManager
from ascend_graph.passes.base import CompileRange, range_bounds
from ascend_graph.pipeline import (
    backend_callable,
    check_backend,
    run_manager_on,
    v1_functionalization,
)
from ascend_graph.version import __version__

FORMAT = 1
MAGIC = b"ascend-graph fused graph\n"
FUSED_BACKENDS = ("eager", "npugraph_ex")


class FusedGraphError(ValueError):
    """Bytes that are no usable fused-graph artifact (damaged, foreign, or stale)."""


@dataclass(frozen=True)
class FusedGraph:
    """The ATen graph a backend runs after the passes, and the graph it was made from."""

    source: str  # `graph_digest` of the ATen graph before the passes
    graph: fx.GraphModule
    reused: bool = False  # True when taken from an earlier compile instead of the passes

    def fused_targets(self) -> list[str]:
        """Names of the `torch.ops.ascend` ops the graph calls, in graph order."""
        return [
            str(node.target)
            for node in self.graph.graph.nodes
            if node.op == "call_function" and str(node.target).startswith("ascend.")
        ]


def _tensor_digest(value: torch.Tensor) -> str:
    meta = f"{value.dtype}{tuple(value.shape)}"
    try:
        flat = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        # Read the bytes directly: numpy is not a dependency, and without it `.numpy()` fails
        # and the tensor's data would silently drop out of the digest.
        if flat.numel() and not flat.data_ptr():
            return meta  # no host memory behind it
        data = ctypes.string_at(flat.data_ptr(), flat.numel()) if flat.numel() else b""
        return meta + hashlib.sha256(data).hexdigest()
    except (RuntimeError, TypeError, NotImplementedError):
        return meta  # fake or meta tensors have no data to hash


def graph_digest(gm: fx.GraphModule) -> str:
    """Hex id of a graph's code and of the tensors it reads from attributes."""
    digest = hashlib.sha256(gm.code.encode())
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value: Any = gm
            for part in str(node.target).split("."):
                value = getattr(value, part, None)
            text = _tensor_digest(value) if isinstance(value, torch.Tensor) else repr(value)
            digest.update(f"{node.target}={text}".encode())
    return digest.hexdigest()


def compile_graph_fused(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    manager: GraphFusionPassManager,
    backend: str = "eager",
    compile_range: CompileRange = None,
    npu_options: Any = None,
    reuse: FusedGraph | None = None,
) -> tuple[Callable[..., Any], FusedGraph]:
    """Compile like `compile_graph`; also return the fused forward graph (see module doc)."""
    if check_backend(backend) not in FUSED_BACKENDS:
        raise ValueError(
            f"backend {backend!r} has no fused-graph artifact; allowed: {', '.join(FUSED_BACKENDS)}"
        )
    import torch._functorch.config as functorch_config
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    forwards: list[FusedGraph] = []

    def fw_compiler(fw: fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
        source = graph_digest(fw)
        if reuse is not None and reuse.source == source:
            fused = FusedGraph(source, reuse.graph, reused=True)
        else:
            fused = FusedGraph(source, run_manager_on(fw, manager, compile_range))
        forwards.append(fused)
        # The extension may rewrite what it is given; the fused graph must stay as saved.
        target = fused.graph if backend == "eager" else copy.deepcopy(fused.graph)
        return cast(Callable[..., Any], make_boxed_func(
            backend_callable(target, inputs, backend, _code_options(npu_options, fused))))

    # AOTAutograd's cache stores only inductor's OutputCode; this forward is a boxed callable
    # of another backend, so caching it fails ("expected OutputCode"): compile uncached.
    with functorch_config.patch(enable_autograd_cache=False), v1_functionalization():
        compiled = aot_autograd(fw_compiler=fw_compiler)(gm, list(example_inputs))
    return compiled, forwards[0]  # aot_autograd compiles the forward before returning


def _code_options(options: Any, fused: FusedGraph) -> Any:
    """`options` without its saved code unless the saved fused graph was reused: code
    generated from another graph must not run in its place."""
    if options is None or getattr(options, "saved_code", None) is None or fused.reused:
        return options
    if options.on_load is not None:
        options.on_load("the graph differs from the one the code was generated for")
    return dataclasses.replace(options, saved_code=None)


def _settings(manager: GraphFusionPassManager, backend: str,
              compile_range: CompileRange) -> dict[str, Any]:
    """What an artifact must have been made with to be reused now."""
    return {
        "format": FORMAT,
        "torch": torch.__version__,
        "ascend_graph": __version__,
        "passes": manager.uuid(),
        "backend": backend,
        "compile_range": list(range_bounds(compile_range)),
    }


def _call_targets(gm: fx.GraphModule) -> Counter[str]:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def dumps_fused_graph(
    fused: FusedGraph,
    *,
    manager: GraphFusionPassManager,
    backend: str,
    compile_range: CompileRange = None,
) -> bytes:
    """Bytes for `loads_fused_graph`; FusedGraphError if the graph does not survive the trip."""
    header = {**_settings(manager, backend, compile_range), "source": fused.source}
    try:
        payload = pickle.dumps(fused.graph)
        rebuilt = pickle.loads(payload)
    except Exception as exc:  # any failure means: this graph cannot be saved
        raise FusedGraphError(f"the fused graph cannot be serialised: {exc!r}") from exc
    if _call_targets(rebuilt) != _call_targets(fused.graph):
        raise FusedGraphError("the fused graph changes when rebuilt from its code")
    header["sha256"] = hashlib.sha256(payload).hexdigest()
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def loads_fused_graph(
    data: bytes,
    *,
    manager: GraphFusionPassManager,
    backend: str,
    compile_range: CompileRange = None,
) -> FusedGraph:
    """The `FusedGraph` in `data`, made with these settings; FusedGraphError saying why not."""
    if not data.startswith(MAGIC):
        raise FusedGraphError("not an ascend-graph fused-graph artifact")
    line, sep, payload = data[len(MAGIC):].partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise FusedGraphError("damaged header") from exc
    if not sep or not isinstance(header, dict):
        raise FusedGraphError("damaged header")
    for field, now in _settings(manager, backend, compile_range).items():
        if header.get(field) != now:
            raise FusedGraphError(f"stale: made with {field}={header.get(field)!r}, now {now!r}")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise FusedGraphError("damaged: checksum mismatch")
    try:
        graph = pickle.loads(payload)
    except Exception as exc:  # the code no longer rebuilds here
        raise FusedGraphError(f"damaged: cannot rebuild the graph: {exc!r}") from exc
    if not isinstance(graph, fx.GraphModule) or not isinstance(header.get("source"), str):
        raise FusedGraphError("damaged: payload is not a graph")
    return FusedGraph(header["source"], graph)
