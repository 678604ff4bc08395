"""kv_cache_attention: `update(k, v, layer)` + `attention(..., kv_cache_dummy_dep=update)` ->
`fused(q, k, v, out, layer)`, end to end through make_backend and on hand-built FX graphs.

The ops are conftest's `kv_ops` stand-ins for vLLM's `unified_kv_cache_update` /
`unified_attention_with_output`: attention reads the layer's key/value from the cache the
update wrote, so a fused call that skipped the write would attend over a missing cache.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch._inductor.config as inductor_config
from ascend_graph import PASS_NAMES, GraphFusionPassManager, make_backend
from ascend_graph.passes.kv_attention import KVCacheAttentionPass
from torch import fx, nn
from torch._higher_order_ops.auto_functionalize import (
    auto_functionalized,
    auto_functionalized_v2,
)
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

aten = torch.ops.aten
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8
HIDDEN = HEADS * HEAD_DIM
LAYERS = ("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")
NO_REWRITES = dict.fromkeys(PASS_NAMES, 0)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Reference attention of `[T, H, D]` tensors (no mask, GQA) by torch's own kernel."""
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), enable_gqa=True
    )
    return out.transpose(0, 1)


def _op_calls(graph: fx.Graph, kv: Any) -> Counter[str]:
    """How many update / attention / fused calls `graph` holds (functionalized or not)."""
    names = {kv.update: "update", kv.attention: "attention", kv.fused: "fused"}
    counts: Counter[str] = Counter()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target in (auto_functionalized, auto_functionalized_v2):
            target = node.args[0]
        if target in names:
            counts[names[target]] += 1
    return counts


# --- end to end: torch.compile(backend=make_backend(...)) ---------------------------------------


class TwoAttentionLayers(nn.Module):
    """Two layers, each projecting q/k/v and attending the way vLLM's Attention layer does:
    `dep = update(k, v, name); attention(q, k, v, out, name, kv_cache_dummy_dep=dep)`."""

    def __init__(self, kv: Any) -> None:
        super().__init__()
        self.update, self.attention = kv.update, kv.attention
        gen = torch.Generator().manual_seed(3)
        width = (HEADS + 2 * KV_HEADS) * HEAD_DIM
        self.qkv = nn.ParameterList(
            [nn.Parameter(torch.randn(width, HIDDEN, generator=gen) * 0.2) for _ in LAYERS]
        )

    def project(self, index: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qkv = nn.functional.linear(x, self.qkv[index])
        q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
        return (q.view(-1, HEADS, HEAD_DIM), k.view(-1, KV_HEADS, HEAD_DIM),
                v.view(-1, KV_HEADS, HEAD_DIM))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, name in enumerate(LAYERS):
            q, k, v = self.project(index, x)
            out = torch.empty_like(q)
            dep = self.update(k, v, name)
            self.attention(q, k, v, out, name, kv_cache_dummy_dep=dep)
            x = x + out.view(-1, HIDDEN)
        return x

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same model with torch's scaled_dot_product_attention instead of the ops."""
        for index in range(len(LAYERS)):
            x = x + _sdpa(*self.project(index, x)).reshape(-1, HIDDEN)
        return x


@dataclass
class E2E:
    got: torch.Tensor
    eager: torch.Tensor
    reference: torch.Tensor
    report: dict[str, int]
    graphs: list[Counter[str]]  # op calls of each graph, taken right after the passes
    calls: list[tuple[str, str]]  # op calls of the compiled run, in order


def _compile_and_run(kv: Any, config: dict[str, Any], *, functionalized_v2: bool) -> E2E:
    torch._dynamo.reset()
    module = TwoAttentionLayers(kv)
    x = _randn(5, HIDDEN, seed=7)
    graphs: list[Counter[str]] = []

    def snapshot(gm: fx.GraphModule) -> None:  # now: inductor lowers the graph further later
        graphs.append(_op_calls(gm.graph, kv))

    backend = make_backend({**config, "attention_ops": kv.handles}, on_graph=snapshot)
    # vLLM sets enable_auto_functionalized_v2=False (its fusion passes match v1 only); it
    # decides the functionalization of both the eager and the inductor pipeline.
    with torch.no_grad(), inductor_config.patch(enable_auto_functionalized_v2=functionalized_v2):
        kv.cache.clear()
        eager = module(x)
        reference = module.reference(x)
        kv.cache.clear()  # the compiled run must write the cache itself
        kv.calls.clear()
        got = torch.compile(module, backend=backend, fullgraph=True)(x)
    return E2E(got, eager, reference, backend.report, graphs, list(kv.calls))


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_both_layers_fuse_and_compute_what_eager_and_sdpa_compute(kv_ops, backend) -> None:
    run = _compile_and_run(kv_ops, {"backend": backend}, functionalized_v2=False)
    assert run.report == {**NO_REWRITES, "kv_cache_attention": 2}
    assert run.graphs == [Counter({"fused": 2})]
    assert run.calls == [("fused", LAYERS[0]), ("fused", LAYERS[1])]
    torch.testing.assert_close(run.eager, run.reference)
    torch.testing.assert_close(run.got, run.eager)
    torch.testing.assert_close(run.got, run.reference)


def test_switch_off_keeps_update_and_attention(kv_ops) -> None:
    run = _compile_and_run(kv_ops, {"fuse_kv_cache_attention": False}, functionalized_v2=False)
    assert run.report == NO_REWRITES
    assert run.graphs == [Counter({"update": 2, "attention": 2})]
    assert run.calls == [("update", LAYERS[0]), ("attention", LAYERS[0]),
                         ("update", LAYERS[1]), ("attention", LAYERS[1])]  # fmt: skip
    torch.testing.assert_close(run.got, run.reference)


def test_auto_functionalized_v2_graphs_are_left_alone(kv_ops) -> None:
    """torch's default functionalization (v2, not vLLM's v1) is not matched: on inductor, whose
    functionalization the caller's inductor config decides (vLLM's says v1), nothing is
    rewritten and the graph still computes the right result."""
    run = _compile_and_run(kv_ops, {"backend": "inductor"}, functionalized_v2=True)
    assert run.report == NO_REWRITES
    assert run.graphs == [Counter({"update": 2, "attention": 2})]
    torch.testing.assert_close(run.got, run.reference)


def test_the_eager_pipeline_functionalizes_as_vllm_does_whatever_torchs_default(kv_ops) -> None:
    """The eager (and npugraph_ex) pipeline derives its ATen graph with v1 functionalization
    even where torch's default (v2) is on, as nothing else sets it outside vLLM's inductor
    (the NPU platform's compile): every layer fuses."""
    run = _compile_and_run(kv_ops, {"backend": "eager"}, functionalized_v2=True)
    assert run.report == {**NO_REWRITES, "kv_cache_attention": 2}
    assert run.graphs == [Counter({"fused": 2})]
    assert run.calls == [("fused", LAYERS[0]), ("fused", LAYERS[1])]
    torch.testing.assert_close(run.got, run.reference)


# --- hand-built functionalized graphs --------------------------------------------------------

T = 3
LAYER = LAYERS[0]


@dataclass
class Site:
    """One graph: placeholders q, k, v, other ([T, KV_HEADS, HEAD_DIM], for a wrong key or
    value or dependency), scale ([1]) and block ([T]); per layer an `empty_like(q)` output
    buffer, `update(k, v, layer)` and the functionalized attention; returns every output."""

    graph: fx.Graph
    nodes: dict[str, fx.Node]
    updates: list[fx.Node]
    attentions: list[fx.Node]
    outs: list[fx.Node]


def _site(kv: Any, layers: tuple[str, ...] = (LAYER,)) -> Site:
    graph = fx.Graph()
    nodes = {name: graph.placeholder(name) for name in ("q", "k", "v", "other", "scale", "block")}
    updates, attentions, outs, results = [], [], [], []
    for layer in layers:
        out = graph.call_function(aten.empty_like.default, (nodes["q"],))
        update = graph.call_function(kv.update, (nodes["k"], nodes["v"], layer))
        attention = graph.call_function(auto_functionalized, (kv.attention,), {
            "query": nodes["q"], "key": nodes["k"], "value": nodes["v"], "output": out,
            "layer_name": layer, "output_scale": None, "output_block_scale": None,
            "kv_cache_dummy_dep": update,
        })  # fmt: skip
        results.append(graph.call_function(operator.getitem, (attention, 1)))
        updates.append(update)
        attentions.append(attention)
        outs.append(out)
    graph.output(tuple(results))
    return Site(graph, nodes, updates, attentions, outs)


def _site_inputs() -> tuple[torch.Tensor, ...]:
    return (_randn(T, HEADS, HEAD_DIM, seed=1), _randn(T, KV_HEADS, HEAD_DIM, seed=2),
            _randn(T, KV_HEADS, HEAD_DIM, seed=3), _randn(T, KV_HEADS, HEAD_DIM, seed=4),
            torch.ones(1), torch.zeros(T))  # fmt: skip


def _module(site: Site) -> fx.GraphModule:
    gm = fx.GraphModule(nn.Module(), site.graph)
    FakeTensorProp(gm).propagate(*_site_inputs())
    return gm


def _lines(graph: fx.Graph) -> list[str]:
    """One line per node: name, kind, target and arguments (nodes shown by name)."""

    def show(value: Any) -> Any:
        return fx.map_arg(value, lambda n: f"%{n.name}")

    return [f"{n.name} = {n.op} {n.target} {show(n.args)!r} {show(n.kwargs)!r}"
            for n in graph.nodes]  # fmt: skip


def _set_kwarg(node: fx.Node, name: str, value: Any) -> None:
    node.kwargs = {**node.kwargs, name: value}


def _second_user(site: Site) -> None:
    output = next(iter(site.graph.find_nodes(op="output")))
    with site.graph.inserting_before(output):
        extra = site.graph.call_function(aten.clone.default, (site.updates[0],))
    output.args = ((*output.args[0], extra),)


def _dependency_elsewhere(site: Site) -> None:
    """The attention waits on another tensor; the update's result goes to a clone."""
    _set_kwarg(site.attentions[0], "kv_cache_dummy_dep", site.nodes["other"])
    _second_user(site)


def _update_as_query(site: Site) -> None:
    """The update's only use is the attention's query; the attention waits on another
    tensor."""
    _set_kwarg(site.attentions[0], "query", site.updates[0])
    _set_kwarg(site.attentions[0], "kv_cache_dummy_dep", site.nodes["other"])


def _label(update: str | None, attention: str | None) -> Callable[[Site], None]:
    def apply(site: Site) -> None:
        site.updates[0].meta["stream_label"] = update
        site.attentions[0].meta["stream_label"] = attention

    return apply


NEAR_MISSES: dict[str, Callable[[Site], None]] = {
    # a fused output quantisation the fused op cannot do
    "output_scale_is_a_node": lambda s: _set_kwarg(s.attentions[0], "output_scale",
                                                   s.nodes["scale"]),
    "output_block_scale_is_a_node": lambda s: _set_kwarg(s.attentions[0], "output_block_scale",
                                                         s.nodes["block"]),
    # erasing the update would take its result from the other user
    "update_has_a_second_user": _second_user,
    # the fused op writes the attention's key/value: not what the update wrote
    "attention_key_differs": lambda s: _set_kwarg(s.attentions[0], "key", s.nodes["other"]),
    "attention_value_differs": lambda s: _set_kwarg(s.attentions[0], "value", s.nodes["other"]),
    "layer_names_differ": lambda s: setattr(s.updates[0], "args",
                                            (s.nodes["k"], s.nodes["v"], LAYERS[1])),
    # the attention is not ordered after this update
    "dependency_is_not_the_update": _dependency_elsewhere,
    "no_dependency": lambda s: _set_kwarg(s.attentions[0], "kv_cache_dummy_dep", None),
    "update_feeds_another_argument": _update_as_query,
    "update_on_another_stream": _label("aux", None),
    "attention_on_another_stream": _label(None, "aux"),
    "two_different_streams": _label("aux", "aux2"),
}  # fmt: skip


@pytest.mark.parametrize("miss", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_near_miss_is_left_exactly_as_it_was(kv_ops, miss) -> None:
    site = _site(kv_ops)
    miss(site)
    gm = _module(site)
    before = _lines(gm.graph)
    misses: list[tuple[str, str]] = []
    manager = GraphFusionPassManager(attention_ops=kv_ops.handles,
                                     on_miss=lambda *call: misses.append(call))
    report = manager.run(gm.graph)
    assert report == NO_REWRITES
    assert _lines(gm.graph) == before
    # every KV-cache update is a site: this one is expected, not matched, and named
    assert manager.sites["kv_cache_attention"] == {"expected": 1, "matched": 0}
    ((name, message),) = misses
    names = {site.updates[0].name, site.attentions[0].name}
    assert name == "kv_cache_attention"
    assert any(f"matching stopped at node {n!r}" in message for n in names), message


def _check_fused(kv: Any, gm: fx.GraphModule, site: Site, index: int) -> None:
    """Site `index` is one fused call with the attention's query/key/value/output/layer."""
    attention, q, k, v = site.attentions[index], *(site.nodes[n] for n in "qkv")
    assert attention.args == (kv.fused,)
    assert attention.kwargs == {"query": q, "key": k, "value": v, "output": site.outs[index],
                                "layer_name": LAYERS[index]}  # fmt: skip
    assert list(attention.kwargs) == ["query", "key", "value", "output", "layer_name"]


@pytest.mark.parametrize("label", [None, "aux"])
def test_site_becomes_one_fused_call_that_attends_like_sdpa(kv_ops, label) -> None:
    site = _site(kv_ops)
    _label(label, label)(site)
    gm = _module(site)
    assert KVCacheAttentionPass(*kv_ops.handles)(gm.graph) == 1
    gm.graph.lint()
    gm.recompile()
    _check_fused(kv_ops, gm, site, 0)
    assert _op_calls(gm.graph, kv_ops) == Counter({"fused": 1})
    assert site.attentions[0].meta["stream_label"] == label
    q, k, v, *_ = inputs = _site_inputs()
    kv_ops.cache.clear()
    kv_ops.calls.clear()
    (got,) = gm(*inputs)
    assert kv_ops.calls == [("fused", LAYER)]
    torch.testing.assert_close(got, _sdpa(q, k, v))
    torch.testing.assert_close(kv_ops.cache[LAYER], (k, v))


def test_fused_call_example_value_is_what_it_computes(kv_ops) -> None:
    """`auto_functionalized(fused)` returns (None, output); the attention call returned
    (None, output, output_block_scale): the recorded value follows the new call."""
    site = _site(kv_ops)
    gm = _module(site)
    recorded = site.attentions[0].meta["val"]
    assert len(recorded) == 3 and recorded[0] is None and recorded[2] is None
    KVCacheAttentionPass(*kv_ops.handles)(gm.graph)
    gm.recompile()
    val = site.attentions[0].meta["val"]
    assert len(val) == 2 and val[0] is None and val[1] is recorded[1]
    computed: dict[str, Any] = {}

    class Record(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            computed[n.name] = result = super().run_node(n)
            return result

    Record(gm).run(*_site_inputs())
    result = computed[site.attentions[0].name]
    assert len(result) == 2 and result[0] is None
    assert (result[1].dtype, result[1].shape) == (val[1].dtype, val[1].shape)


def test_a_near_miss_does_not_stop_the_next_site(kv_ops) -> None:
    site = _site(kv_ops, layers=LAYERS)
    _set_kwarg(site.attentions[0], "output_scale", site.nodes["scale"])
    gm = _module(site)
    manager = GraphFusionPassManager(attention_ops=kv_ops.handles)
    report = manager.run(gm.graph)
    assert report == {**NO_REWRITES, "kv_cache_attention": 1}
    assert manager.sites["kv_cache_attention"] == {"expected": 2, "matched": 1}
    miss = manager.last_sites["kv_cache_attention"].miss
    assert miss is not None and miss.node == site.attentions[0].name
    assert "output quantisation (output_scale)" in miss.why
    assert site.attentions[0].args == (kv_ops.attention,)
    assert site.updates[0] in gm.graph.nodes
    _check_fused(kv_ops, gm, site, 1)
    assert _op_calls(gm.graph, kv_ops) == Counter({"update": 1, "attention": 1, "fused": 1})


def test_eager_input_vals_follow_the_new_call(kv_ops) -> None:
    site = _site(kv_ops, layers=LAYERS)
    values = {name: object() for name in ("query", "key", "value", "output", "layer_name",
                                          "output_scale", "output_block_scale",
                                          "kv_cache_dummy_dep")}  # fmt: skip
    site.attentions[0].meta["eager_input_vals"] = ((None,), dict(values))
    assert KVCacheAttentionPass(*kv_ops.handles)(site.graph) == 2
    args, kwargs = site.attentions[0].meta["eager_input_vals"]
    assert args == (kv_ops.fused,)
    assert list(kwargs) == ["query", "key", "value", "output", "layer_name"]
    assert all(kwargs[name] is values[name] for name in kwargs)
    assert "eager_input_vals" not in site.attentions[1].meta  # none recorded: none made up


def test_eager_input_vals_of_a_near_miss_are_untouched(kv_ops) -> None:
    site = _site(kv_ops)
    _set_kwarg(site.attentions[0], "output_scale", site.nodes["scale"])
    recorded = ((None,), {"query": object()})
    site.attentions[0].meta["eager_input_vals"] = recorded
    assert KVCacheAttentionPass(*kv_ops.handles)(site.graph) == 0
    assert site.attentions[0].meta["eager_input_vals"] is recorded


# --- construction, settings, uuid ----------------------------------------------------------


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ((0,), "update_op"),
        ((1,), "attention_op"),
        ((2,), "fused_op"),
        ((0, 2), "update_op, fused_op"),
        ((0, 1, 2), "update_op, attention_op, fused_op"),
    ],
)
def test_constructor_names_every_missing_handle(kv_ops, missing, named) -> None:
    handles = [None if i in missing else h for i, h in enumerate(kv_ops.handles)]
    message = ("kv_cache_attention needs the op handles update_op, attention_op and fused_op; "
               f"missing: {named}")  # fmt: skip
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        KVCacheAttentionPass(*handles)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        GraphFusionPassManager(attention_ops=tuple(handles))
    # switched off, the handles are not looked at
    assert (
        "kv_cache_attention"
        not in GraphFusionPassManager(
            attention_ops=tuple(handles), fuse_kv_cache_attention=False
        ).enabled
    )


def test_pass_runs_last_and_only_with_handles_and_switch(kv_ops) -> None:
    assert GraphFusionPassManager().enabled == (
        "noop_elimination", "norm_quant", "qknorm_rope", "muls_add",
    )  # fmt: skip
    assert GraphFusionPassManager(attention_ops=kv_ops.handles).enabled == (
        "noop_elimination", "norm_quant", "qknorm_rope", "muls_add", "kv_cache_attention",
    )  # fmt: skip
    assert GraphFusionPassManager(attention_ops=kv_ops.handles, fuse_norm_quant=False,
                                  fuse_qknorm_rope=False, fuse_muls_add=False).enabled == (
        "noop_elimination", "kv_cache_attention",
    )  # fmt: skip
    off = GraphFusionPassManager(attention_ops=kv_ops.handles, fuse_kv_cache_attention=False)
    assert off.enabled == ("noop_elimination", "norm_quant", "qknorm_rope", "muls_add")
    with pytest.raises(ValueError, match=r"^fuse_kv_cache_attention must be true or false, got 1$"):
        GraphFusionPassManager(fuse_kv_cache_attention=1)  # type: ignore[arg-type]


def test_make_backend_keys_reach_the_manager(kv_ops) -> None:
    assert make_backend({"attention_ops": kv_ops.handles}).manager.enabled[-1] == (
        "kv_cache_attention"
    )
    off = make_backend({"attention_ops": kv_ops.handles, "fuse_kv_cache_attention": False})
    assert "kv_cache_attention" not in off.manager.enabled
    assert "kv_cache_attention" not in make_backend().manager.enabled
    assert make_backend().report == NO_REWRITES
    manager = GraphFusionPassManager.from_switches(
        {"fuse_kv_cache_attention": False}, attention_ops=kv_ops.handles
    )
    assert "kv_cache_attention" not in manager.enabled


def test_settings_and_uuid_change_with_the_attention_ops(kv_ops) -> None:
    without = GraphFusionPassManager()
    with_ops = GraphFusionPassManager(attention_ops=kv_ops.handles)
    ns = kv_ops.namespace
    assert with_ops.settings() == {
        "soc": "cpu", "w4a4": False,
        "passes": [*without.settings()["passes"], {
            "name": "kv_cache_attention", "min_tokens": None, "max_tokens": None,
            "ops": [f"{ns}.update.default", f"{ns}.attention.default", f"{ns}.fused.default"],
        }],
    }  # fmt: skip
    assert with_ops.uuid() != without.uuid()
    assert with_ops.uuid() == GraphFusionPassManager(attention_ops=kv_ops.handles).uuid()
    # switched off: the same as no handles
    off = GraphFusionPassManager(attention_ops=kv_ops.handles, fuse_kv_cache_attention=False)
    assert off.settings() == without.settings() and off.uuid() == without.uuid()
    # another fused op, or the handles in another order, is another setting
    other_fused = (kv_ops.update, kv_ops.attention, aten.clone.default)
    swapped = (kv_ops.attention, kv_ops.update, kv_ops.fused)
    ids = {GraphFusionPassManager(attention_ops=ops).uuid() for ops in (other_fused, swapped)}
    assert len(ids) == 2 and with_ops.uuid() not in ids and without.uuid() not in ids
