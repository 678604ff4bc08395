"""Shared fixtures: small real modules whose layers call torch.ops.ascend.*, and a compile
helper that returns outputs, the rewritten graphs and the backend report."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ascend_graph
import ascend_kernels  # noqa: F401  (registers torch.ops.ascend)
import pytest
import torch
from ascend_graph.pipeline import compile_graph
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

A = torch.ops.ascend


@dataclass
class Compiled:
    outputs: Any
    reference: Any
    graphs: list[fx.GraphModule] = field(default_factory=list)
    report: dict[str, int] = field(default_factory=dict)
    fn: Callable[..., Any] | None = None

    def symbolic(self) -> bool:
        """True when some compiled graph has a symbolic size (dynamic shapes took effect)."""
        return any(
            isinstance(n.meta.get("val"), torch.SymInt)
            for gm in self.graphs
            for n in gm.graph.nodes
            if n.op == "placeholder"
        )

    def op_counts(self) -> Counter[str]:
        """Call-target name -> number of nodes, over every compiled graph."""
        counts: Counter[str] = Counter()
        for gm in self.graphs:
            for node in gm.graph.nodes:
                if node.op == "call_function":
                    counts[_name(node.target)] += 1
        return counts


def _name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}"
    return getattr(target, "__name__", str(target))


def run_compiled(
    module: nn.Module,
    inputs: tuple[Any, ...],
    *,
    config: dict[str, Any] | None = None,
    dynamic: bool = False,
) -> Compiled:
    """Eager reference and compiled run (make_backend, eager backend) of `module`.

    `dynamic` marks the token dimension (dim 0) of every tensor input dynamic, as vLLM does;
    `torch.compile(dynamic=True)` would also turn Python float attributes into graph inputs.
    """
    torch._dynamo.reset()  # fresh compile: no cache hit, no recompile limit across tests
    graphs: list[fx.GraphModule] = []
    backend = ascend_graph.make_backend(config, on_graph=graphs.append)
    if dynamic:
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.dim() >= 1:
                torch._dynamo.mark_dynamic(t, 0)
    with torch.no_grad():
        reference = module(*inputs)
        compiled = torch.compile(module, backend=backend, fullgraph=True)
        outputs = compiled(*inputs)
    return Compiled(outputs, reference, graphs, backend.report, compiled)


@pytest.fixture
def compile_module() -> Callable[..., Compiled]:
    return run_compiled


def assert_close(got: Any, want: Any, dtype: torch.dtype) -> None:
    """Fused vs unfused: exact in float32 up to rounding; int8 may move by one in bf16."""
    got_t = got if isinstance(got, (tuple, list)) else (got,)
    want_t = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got_t) == len(want_t)
    for g, w in zip(got_t, want_t, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if g.dtype == torch.int8:
            diff = (g.int() - w.int()).abs().max().item() if g.numel() else 0
            assert diff <= (0 if dtype == torch.float32 else 1)
        elif g.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            torch.testing.assert_close(g.float(), w.float(), rtol=0.13, atol=0.02)
        else:
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol)


@pytest.fixture
def close() -> Callable[..., None]:
    return assert_close


# --- real modules -----------------------------------------------------------------------


class NormQuantLayers(nn.Module):
    """Every norm+quant idiom the quantised models use, one after the other."""

    def __init__(self, hidden: int = 64, eps: float = 1e-6, y_extra_user: bool = False) -> None:
        super().__init__()
        self.eps, self.y_extra_user = eps, y_extra_user
        self.w = nn.ParameterList([nn.Parameter(torch.rand(hidden) + 0.5) for _ in range(6)])
        self.bias = nn.Parameter(torch.randn(hidden) * 0.1)
        self.register_buffer("scale", torch.tensor([0.02]))
        self.register_buffer("offset", torch.tensor([1.0]))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
        eps, outs = self.eps, []
        y, residual = A.add_rms_norm(x, residual, self.w[0], eps)
        outs.append(A.quantize(y, self.scale, self.offset))
        if self.y_extra_user:
            outs.append(y * 2)
        y, residual = A.add_rms_norm(x, residual, self.w[1], eps, self.bias)
        outs.append(A.quantize(y, self.scale, self.offset))
        y, residual = A.add_rms_norm(x, residual, self.w[2], eps)
        outs.extend(A.dynamic_quant(y))
        y, residual = A.add_rms_norm(x, residual, self.w[3], eps, self.bias)
        outs.extend(A.dynamic_quant(y))
        y, residual = A.add_rms_norm(x, residual, self.w[4], eps)
        outs.extend(A.dynamic_mx_quant(y))
        outs.extend(A.dynamic_mx_quant(A.rms_norm(residual, self.w[5], eps)))
        outs.append(residual)
        return tuple(outs)


class QKNormRopeAttention(nn.Module):
    """Qwen3 attention prologue: qkv projection, per-head q/k RMSNorm, rope (vLLM's code
    shape: split, view to heads, norm, view back, functional rotary_embedding)."""

    def __init__(
        self, hidden: int = 128, heads: int = 4, kv_heads: int = 2, head_dim: int = 32,
        eps: float = 1e-6, bias: bool = False, k_eps: float | None = None,
        three_splits: bool = False, q_extra_user: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        self.head_dim, self.q_size, self.kv_size = head_dim, heads * head_dim, kv_heads * head_dim
        self.eps, self.k_eps = eps, eps if k_eps is None else k_eps
        self.three_splits, self.q_extra_user = three_splits, q_extra_user
        self.qkv = nn.Linear(hidden, self.q_size + 2 * self.kv_size, bias=False)
        self.q_w = nn.Parameter(torch.rand(head_dim) + 0.5)
        self.k_w = nn.Parameter(torch.rand(head_dim) + 0.5)
        self.q_b = nn.Parameter(torch.randn(head_dim) * 0.1) if bias else None
        self.k_b = nn.Parameter(torch.randn(head_dim) * 0.1) if bias else None
        self.register_buffer("cos_sin_cache", torch.randn(64, head_dim))

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qkv = self.qkv(hidden)
        sizes = [self.q_size, self.kv_size, self.kv_size]
        if self.three_splits:
            q, k, v = (qkv.split(sizes, dim=-1)[i] for i in range(3))
        else:
            q, k, v = qkv.split(sizes, dim=-1)
        hd = self.head_dim
        q_heads = A.rms_norm(q.view(*q.shape[:-1], q.shape[-1] // hd, hd), self.q_w, self.eps)
        k_heads = A.rms_norm(k.view(*k.shape[:-1], k.shape[-1] // hd, hd), self.k_w, self.k_eps)
        if self.q_b is not None:
            q_heads, k_heads = q_heads + self.q_b, k_heads + self.k_b
        q, k = q_heads.view(q.shape), k_heads.view(k.shape)
        q, k = A.rotary_embedding(positions, q, k, self.cos_sin_cache, hd, hd, True)
        extra = (q_heads.sum(),) if self.q_extra_user else ()
        return (q, k, v, *extra)


class MoEOutput(nn.Module):
    """MoE output combination: routed experts scaled by the routed scaling factor."""

    def __init__(self, hidden: int = 64, scale: float = 2.5) -> None:
        super().__init__()
        self.scale = scale
        self.up = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, shared: torch.Tensor) -> tuple[torch.Tensor, ...]:
        routed = self.up(x)
        a = routed * self.scale + shared  # x * s + y
        b = shared + routed.relu() * self.scale  # y + x * s
        return a, b


@pytest.fixture
def models() -> dict[str, type[nn.Module]]:
    return {"norm_quant": NormQuantLayers, "qknorm": QKNormRopeAttention, "moe": MoEOutput}


# --- running one traced site through a manager (the near-miss catalogue) ----------------


@dataclass
class SiteOutcome:
    """Graph printouts before/after the passes, their report, and the rewritten graph's
    outputs; `symbolic` when the graph had SymInt sizes."""

    before: list[str]
    after: list[str]
    report: dict[str, int]
    outputs: Any
    symbolic: bool
    labels: set[Any] = field(default_factory=set)  # stream labels of the calls afterwards
    # nodes whose recorded example value disagrees (dtype/shape) with what they compute
    meta_mismatches: list[str] = field(default_factory=list)


def canonical(graph: fx.Graph) -> list[str]:
    """One line per node: name, kind, target and arguments (nodes shown by name)."""

    def show(value: Any) -> Any:
        return fx.map_arg(value, lambda n: f"%{n.name}")

    return [f"{n.name} = {n.op} {n.target} {show(n.args)!r} {show(n.kwargs)!r}"
            for n in graph.nodes]  # fmt: skip


def _label(graph: fx.Graph, streams: dict[str, str]) -> None:
    for node in graph.nodes:
        for key, label in streams.items():
            if node.op == "call_function" and (key == "*" or key in str(node.target)):
                node.meta["stream_label"] = label


class _MetaCheck(fx.Interpreter):
    """Runs a graph for real and notes every node whose `meta["val"]` has another dtype or
    shape than the value it computes (passes must keep example values truthful)."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.mismatches: list[str] = []

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        val = n.meta.get("val")
        if n.op != "output" and "val" in n.meta and _layout(val) != _layout(result):
            self.mismatches.append(f"{n.name}: {_layout(val)} recorded, {_layout(result)} computed")
        return result


def _layout(value: Any) -> Any:
    """dtype and shape of every tensor in a value (None where the value holds none)."""
    if isinstance(value, (tuple, list)):
        return tuple(_layout(v) for v in value)
    if isinstance(value, torch.Tensor):
        return (value.dtype, tuple(value.shape))
    return None


def _traced(site: Any) -> fx.GraphModule:
    if site.trace == "fx":
        gm = fx.symbolic_trace(site.fn)
        FakeTensorProp(gm).propagate(*site.inputs)
        return gm
    return make_fx(site.fn, tracing_mode="fake")(*site.inputs)


class _Snapshots(ascend_graph.GraphFusionPassManager):
    """A manager that keeps the printout of every graph before and after its passes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.before: list[list[str]] = []
        self.after: list[list[str]] = []
        self.symbolic = False

    def run(self, graph: Any, compile_range: Any = None) -> dict[str, int]:
        self.symbolic |= any(isinstance(n.meta.get("val"), torch.SymInt) for n in graph.nodes)
        self.before.append(canonical(graph))
        counts = super().run(graph, compile_range)
        self.after.append(canonical(graph))
        return counts


def run_site(site: Any) -> SiteOutcome:
    """Trace `site` (fn, inputs, manager kwargs, trace, dynamic, streams), run a manager on
    the graph, and run the rewritten graph on the inputs.

    trace "make_fx": static fake-tensor trace; "fx": `fx.symbolic_trace` (call_method nodes)
    with fake values propagated; "dynamo": `torch.compile` through `compile_graph` with dim 0
    of the inputs listed in `dynamic` marked dynamic. `streams` maps a target substring
    ("*": every call) to the stream label put on those nodes before the passes.
    """
    if site.trace == "dynamo":
        torch._dynamo.reset()
        manager = _Snapshots(**site.manager)
        for index in site.dynamic:
            torch._dynamo.mark_dynamic(site.inputs[index], 0)

        def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            return compile_graph(gm, example_inputs, manager=manager)

        with torch.no_grad():
            outputs = torch.compile(site.fn, backend=backend, fullgraph=True)(*site.inputs)
        (before,), (after,) = manager.before, manager.after
        return SiteOutcome(before, after, dict(manager.counts), outputs, manager.symbolic)
    gm = _traced(site)
    _label(gm.graph, site.streams)
    before = canonical(gm.graph)
    report = ascend_graph.GraphFusionPassManager(**site.manager).run(gm.graph)
    gm.graph.lint()
    gm.recompile()
    labels = {n.meta.get("stream_label") for n in gm.graph.nodes if n.op == "call_function"}
    check = _MetaCheck(gm)
    outputs = check.run(*site.inputs)
    return SiteOutcome(before, canonical(gm.graph), report, outputs, False, labels,
                       check.mismatches)  # fmt: skip


@pytest.fixture(name="run_site")
def run_site_fixture() -> Callable[[Any], SiteOutcome]:
    return run_site


@pytest.fixture(scope="module")
def sp_ops() -> Any:
    """Stand-ins for vLLM's all_gather / sequence_parallel_chunk_impl (world of 2, rank 0):
    `all_gather(x, world)` and `chunk(x, parts, dtype=None)` (rank 0's rows, optionally cast).

    The namespace is new each time: torch.ops caches op handles by name, so a namespace
    destroyed and defined again in one process (pytest run twice in-process, as mutmut
    does) would hand out stale handles.
    """
    namespace = f"ascend_graph_test_{uuid.uuid4().hex[:8]}"
    lib = torch.library.Library(namespace, "DEF")
    lib.define("all_gather(Tensor x, int world) -> Tensor")
    lib.define("chunk(Tensor x, int parts, ScalarType? dtype=None) -> Tensor")

    def gather(x: torch.Tensor, world: int) -> torch.Tensor:
        return torch.cat([x] * world)

    def chunk(x: torch.Tensor, parts: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return x[: x.shape[0] // parts].to(dtype or x.dtype).clone()

    for name, impl in (("all_gather", gather), ("chunk", chunk)):
        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{name}", impl, lib=lib)
    yield getattr(torch.ops, namespace)
    lib._destroy()


def _scaled_sum(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
    return (x * 2.5 + y,)


@pytest.fixture
def scaled_sum() -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor]]:
    """``(x * 2.5 + y,)``: one muls_add site."""
    return _scaled_sum


@pytest.fixture
def bounded_manager() -> Callable[[], ascend_graph.GraphFusionPassManager]:
    """A fresh float32 manager whose muls_add applies to compile ranges within 4 tokens only
    (an unknown range, None, is not within them)."""

    def make() -> ascend_graph.GraphFusionPassManager:
        manager = ascend_graph.GraphFusionPassManager(dtypes=["float32"])
        (muls_add,) = [p for p in manager.passes if p.name == "muls_add"]
        muls_add.max_tokens = 4
        return manager

    return make


# --- stand-ins for vLLM's KV-cache update and attention ops (kv_cache_attention) ----------


@dataclass
class KVOps:
    """Test ops in a fresh namespace: `update` writes a layer's key/value into `cache`,
    `attention` attends over that layer's cached key/value, `fused` does both. Every call is
    logged in `calls` as (op, layer_name)."""

    namespace: str
    update: Any
    attention: Any
    fused: Any
    cache: dict[str, tuple[torch.Tensor, torch.Tensor]]
    calls: list[tuple[str, str]]

    @property
    def handles(self) -> tuple[Any, Any, Any]:
        """`attention_ops` for the manager / make_backend."""
        return (self.update, self.attention, self.fused)


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v per head, no causal mask; `[T, H, D]` tensors, the key and
    value heads shared by groups of query heads (GQA)."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scores = torch.einsum("thd,shd->hts", query, key) * query.shape[-1] ** -0.5
    return torch.einsum("hts,shd->thd", scores.softmax(-1), value)


@pytest.fixture(scope="module")
def kv_ops() -> Any:
    """KVOps with the schemas of vLLM's `unified_kv_cache_update` /
    `unified_attention_with_output` (layer name a str) and a fused op taking the attention's
    first five arguments. New namespace each time, for the reason given in `sp_ops`."""
    namespace = f"ascend_graph_kv_{uuid.uuid4().hex[:8]}"
    cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    calls: list[tuple[str, str]] = []
    lib = torch.library.Library(namespace, "DEF")
    lib.define("update(Tensor key, Tensor value, str layer_name) -> Tensor")
    lib.define(
        "attention(Tensor query, Tensor key, Tensor value, Tensor(a!) output, str layer_name, "
        "Tensor? output_scale=None, Tensor(b!)? output_block_scale=None, "
        "Tensor? kv_cache_dummy_dep=None) -> ()"
    )
    lib.define(
        "fused(Tensor query, Tensor key, Tensor value, Tensor(a!) output, str layer_name) -> ()"
    )

    def store(key: torch.Tensor, value: torch.Tensor, layer_name: str) -> None:
        cache[layer_name] = (key.clone(), value.clone())

    def update(key: torch.Tensor, value: torch.Tensor, layer_name: str) -> torch.Tensor:
        calls.append(("update", layer_name))
        store(key, value, layer_name)
        return key.new_empty(0)

    def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  output: torch.Tensor, layer_name: str, output_scale: Any = None,
                  output_block_scale: Any = None, kv_cache_dummy_dep: Any = None) -> None:
        calls.append(("attention", layer_name))
        output.copy_(_attend(query, *cache[layer_name]))  # the cache, not key/value

    def fused(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              output: torch.Tensor, layer_name: str) -> None:
        calls.append(("fused", layer_name))
        store(key, value, layer_name)
        output.copy_(_attend(query, *cache[layer_name]))

    def update_fake(key: torch.Tensor, value: torch.Tensor, layer_name: str) -> torch.Tensor:
        return key.new_empty(0)

    def no_result(*args: Any, **kwargs: Any) -> None:
        return None

    for name, impl, fake in (("update", update, update_fake), ("attention", attention, no_result),
                             ("fused", fused, no_result)):  # fmt: skip
        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
    ops = getattr(torch.ops, namespace)
    yield KVOps(namespace, ops.update.default, ops.attention.default, ops.fused.default,
                cache, calls)  # fmt: skip
    lib._destroy()
