"""qknorm_rope: split + per-head q/k RMSNorm (+bias) + rope -> split_qkv_rmsnorm_rope."""

from __future__ import annotations

import operator

import ascend_kernels
import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.base import PatternPass
from ascend_graph.passes.fusion_passes import QKNormRopePass
from ascend_graph.passes.qknorm_rope import FUSED_OP, QKNormRopePattern
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

FUSED = "ascend.split_qkv_rmsnorm_rope"


def _inputs(dtype: torch.dtype, tokens: int = 6, hidden: int = 128) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(2)
    return torch.randint(0, 64, (tokens,), generator=gen), torch.randn(
        tokens, hidden, generator=gen
    ).to(dtype)


def _fused_nodes(result):
    return [
        n for gm in result.graphs for n in gm.graph.nodes
        if n.op == "call_function" and str(n.target) == "ascend.split_qkv_rmsnorm_rope.default"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("dtype", "dynamic", "bias", "three_splits"),
    [
        (torch.float32, False, False, True),  # fp32 graphs: one split node per getitem
        (torch.bfloat16, False, True, False),  # bf16 graphs: one split, three getitems
        (torch.float32, True, True, False),
        (torch.bfloat16, True, False, True),
    ],
)
def test_fuses(models, compile_module, close, dtype, dynamic, bias, three_splits) -> None:
    module = models["qknorm"](bias=bias, three_splits=three_splits).to(dtype)
    result = compile_module(module, _inputs(dtype), dynamic=dynamic)
    assert result.symbolic() == dynamic
    counts = result.op_counts()
    assert counts[FUSED] == 1 and result.report["qknorm_rope"] == 1
    assert counts["ascend.rms_norm"] == 0 and counts["ascend.rotary_embedding"] == 0
    # v stays qkv's view (no copy): one split is left, read only at v, and the op's own v is
    # unused
    assert counts["aten.split_with_sizes"] == 1
    (split,) = [n for gm in result.graphs for n in gm.graph.nodes
                if n.target == torch.ops.aten.split_with_sizes.default]
    assert [u.args[1] for u in split.users] == [2]
    (node,) = _fused_nodes(result)
    assert sorted(u.args[1] for u in node.users) == [0, 1]
    # q_size, kv_size, head_size, rotary_dim, is_neox, eps
    assert node.args[5:11] == (128, 64, 32, 32, True, 1e-6)
    assert (node.args[11] is None) == (not bias)
    close(result.outputs, result.reference, dtype)


def test_two_models_with_different_head_sizes_get_their_own_patterns(
    models, compile_module, close
) -> None:
    small = models["qknorm"](heads=4, kv_heads=2, head_dim=32)
    wide = models["qknorm"](hidden=128, heads=2, kv_heads=1, head_dim=64)
    cfg_small = {"qknorm_shapes": [(32, 128, 64)]}
    cfg_wide = {"qknorm_shapes": [(64, 128, 64)]}
    a = compile_module(small, _inputs(torch.float32), config=cfg_small)
    b = compile_module(wide, _inputs(torch.float32), config=cfg_wide)
    assert a.report["qknorm_rope"] == b.report["qknorm_rope"] == 1
    assert _fused_nodes(a)[0].args[5:8] == (128, 64, 32)
    assert _fused_nodes(b)[0].args[5:8] == (128, 64, 64)
    close(a.outputs, a.reference, torch.float32)
    close(b.outputs, b.reference, torch.float32)
    # the small model's registration does not match the wide model (and vice versa)
    crossed = compile_module(wide, _inputs(torch.float32), config=cfg_small)
    assert crossed.report["qknorm_rope"] == 0


@pytest.mark.parametrize(
    ("kwargs", "config"),
    [
        ({"k_eps": 1e-5}, None),  # q and k norms disagree on eps
        ({"q_extra_user": True}, None),  # normed q heads also used elsewhere
        ({}, {"soc": "A2"}),  # A2 kernel: bf16 with head size 128 only
        ({"eps": 1e-4}, None),  # eps not registered
    ],
)
def test_near_misses_are_left_alone(models, compile_module, close, kwargs, config) -> None:
    result = compile_module(models["qknorm"](**kwargs), _inputs(torch.float32), config=config)
    counts = result.op_counts()
    assert result.report["qknorm_rope"] == 0 and counts[FUSED] == 0
    assert counts["ascend.rotary_embedding"] == 1 and counts["ascend.rms_norm"] == 2
    close(result.outputs, result.reference, torch.float32)


def test_unsupported_head_size_on_npu_soc_is_not_registered() -> None:
    assert not ascend_kernels.supports(FUSED_OP, dtype=torch.bfloat16, head_dim=32, soc="A2")
    assert QKNormRopePass(soc="A2", shapes=[(32, 128, 64)]).patterns == ()
    registered = QKNormRopePass(soc="A2", shapes=[(128, 512, 128)]).patterns
    assert registered and {p.settings["dtype"] for p in registered} == {torch.bfloat16}


def test_mixed_streams_never_fuse() -> None:
    pattern = QKNormRopePass(dtypes=["float32"]).patterns[0]
    gm = make_fx(pattern.search, tracing_mode="fake")(*pattern.example_inputs())
    rope = next(n for n in gm.graph.nodes if "rotary" in str(n.target))
    rope.meta["stream_label"] = "aux"
    assert GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["qknorm_rope"] == 0
    del rope.meta["stream_label"]
    assert GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["qknorm_rope"] == 1
    assert not [n for n in gm.graph.nodes if n.target is operator.getitem and not n.users]


# --- the matcher at its boundaries, on graphs traced from small functions ------------------
# `_attention` is the idiom (4 q heads, 2 kv heads of 32); its options change one detail.
# Graphs are traced with make_fx, optionally edited (keyword arguments, example values
# removed), then run through a float32 manager and compared with the function run eagerly.

A = torch.ops.ascend
aten = torch.ops.aten
HD, EPS = 32, 1e-6


def _attention(*, hd=HD, sizes=None, split_dim=-1, tokens=None, q_view=None, q_width=None,
               add=None, bias=False, extra=None):  # fmt: skip
    """qkv.split -> view to heads -> rms_norm [-> + bias or `add`] -> view back -> rope.

    `q_view(q, t)` replaces the q head view (`q_width`: its norm weight's size); `extra`
    names an intermediate also returned ("flat", "heads" or "normed", all of q)."""
    sizes = sizes or (4 * hd, 2 * hd, 2 * hd)

    def fn(qkv, qw, kw, positions, cache, *biases):
        q, k, v, *rest = qkv.split(list(sizes), split_dim)
        t = tokens or qkv.shape[0]
        heads = q_view(q, t) if q_view else q.view(t, sizes[0] // hd, hd)
        qn = A.rms_norm(heads, qw, EPS)
        kn = A.rms_norm(k.view(t, sizes[1] // hd, hd), kw, EPS)
        if biases:
            qn, kn = qn + biases[0], kn + biases[1]
        if add is not None:
            qn, kn = qn + add, kn + add
        qf, kf = qn.view(t, sizes[0]), kn.view(t, sizes[1])
        qr, kr = A.rotary_embedding(positions, qf, kf, cache, hd, hd, True)
        shown = {"flat": qf, "heads": heads, "normed": qn}
        return qr, kr, v, *rest, *((shown[extra] * 2,) if extra else ())

    gen = torch.Generator().manual_seed(3)
    rows = tokens or 5
    qkv = torch.randn(*((sum(sizes), tokens) if split_dim == 0 else (rows, sum(sizes))),
                      generator=gen)  # fmt: skip
    inputs = [qkv, torch.rand(q_width or hd, generator=gen) + 0.5,
              torch.rand(hd, generator=gen) + 0.5, torch.arange(rows) % 16,
              torch.randn(16, hd, generator=gen)]  # fmt: skip
    if bias:
        inputs += [0.1 * torch.randn(hd, generator=gen), 0.1 * torch.randn(hd, generator=gen)]
    return fn, tuple(inputs)


def _printout(graph: torch.fx.Graph) -> list[str]:
    return [f"{n.name} {n.op} {n.target} {n.args} {n.kwargs}" for n in graph.nodes]


def _run(site, *, edit=None, dtype=torch.float32, qk_pass=None):
    """(sites fused, graph before, graph after, graph outputs, eager outputs)."""
    fn, inputs = site
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    if edit is not None:
        edit(gm.graph)
        gm.recompile()
    before = _printout(gm.graph)
    if qk_pass is None:
        count = GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["qknorm_rope"]
    else:
        count = qk_pass(gm.graph)
    gm.graph.lint()
    gm.recompile()
    with torch.no_grad():
        return count, before, _printout(gm.graph), gm(*inputs), fn(*inputs)


def _assert_fused(outcome, close, dtype=torch.float32) -> torch.fx.Node:
    count, before, after, got, want = outcome
    assert count == 1 and after != before
    (line,) = [a for a in after if f"{FUSED}.default" in a]
    assert "rms_norm " not in " ".join(after) and "rotary_embedding" not in " ".join(after)
    close(got, want, dtype)
    return line


def _assert_unchanged(outcome) -> None:
    count, before, after, got, want = outcome
    assert count == 0 and after == before
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and torch.equal(g, w)


def _strip_view_values(graph: torch.fx.Graph) -> None:
    """Views without example values: the matcher reads their shape arguments instead."""
    for node in graph.find_nodes(op="call_function", target=aten.view.default):
        del node.meta["val"]


def _keywords(target, names):
    """An edit passing the trailing arguments `names` of every `target` call by keyword."""

    def edit(graph: torch.fx.Graph) -> None:
        for node in graph.find_nodes(op="call_function", target=target):
            keep = len(node.args) - len(names)
            node.kwargs = {**node.kwargs, **dict(zip(names, node.args[keep:], strict=True))}
            node.args = node.args[:keep]

    return edit


def test_heads_view_with_minus_one_is_read_from_the_example_value(close) -> None:
    line = _assert_fused(_run(_attention(q_view=lambda q, t: q.view(t, -1, HD))), close)
    assert "128, 64, 32, 32, True, 1e-06" in line


def test_views_without_example_values_are_read_from_their_shape_arguments(close) -> None:
    _assert_fused(_run(_attention(), edit=_strip_view_values), close)


@pytest.mark.parametrize("edit", [None, _strip_view_values], ids=["values", "shape-args"])
def test_one_token_heads_view_without_token_dim_fuses(close, edit) -> None:
    """[1, 128] viewed as [4, 32]: the head view has exactly the two dims the matcher reads."""
    site = _attention(tokens=1, q_view=lambda q, t: q.view(4, HD))
    _assert_fused(_run(site, edit=edit), close)


def _view_size_by_keyword(graph: torch.fx.Graph) -> None:
    _strip_view_values(graph)
    _keywords(aten.view.default, ["size"])(graph)


def _runtime_head_count(graph: torch.fx.Graph) -> None:
    """Four tokens: the q head view [4, 4, 32] gets its heads dim from `qkv.size(0)`."""
    _strip_view_values(graph)
    qkv = next(iter(graph.find_nodes(op="placeholder")))
    heads = next(iter(graph.find_nodes(op="call_function", target=aten.view.default)))
    with graph.inserting_before(heads):
        count = graph.call_function(aten.sym_size.int, (qkv, 0))
    heads.args = (heads.args[0], [heads.args[1][0], count, heads.args[1][2]])


def _split_dim_left_out(graph: torch.fx.Graph) -> None:
    (split,) = graph.find_nodes(op="call_function", target=aten.split_with_sizes.default)
    split.args = split.args[:2]  # dim defaults to 0


@pytest.mark.parametrize(
    ("options", "edit"),
    [
        # head view flattened to 1-D (one token): there are no two head dims to read
        ({"tokens": 1, "q_view": lambda q, t: q.reshape(4 * HD), "q_width": 4 * HD}, None),
        # view size passed by keyword, no example values: the head dims cannot be read
        ({}, _view_size_by_keyword),
        # one token as [2, 4, 16]: 16-wide norms, although 4 * 32 == q_size
        ({"tokens": 1, "q_view": lambda q, t: q.view(2, 4, 16), "q_width": 16}, None),
        # one token as [2, 2, 32]: 32-wide norms, but not [T, heads, head_size]
        ({"tokens": 1, "q_view": lambda q, t: q.view(2, 2, HD)}, None),
        # the heads dim is a value known only at run time
        ({"tokens": 4}, _runtime_head_count),
        ({"extra": "flat"}, None),  # the flattened normed q is also used elsewhere
        ({"extra": "heads"}, None),  # the q head view is also used elsewhere
        ({"extra": "normed", "bias": True}, None),  # the biased q is also used elsewhere
        ({"add": 0.5}, None),  # a scalar added after the norm is not a [head_size] bias
        ({"sizes": (128, 64, 32)}, None),  # k and v chunks differ in size
        ({"sizes": (128, 64, 64, 32)}, None),  # a four-way split
        # split along the tokens (dim 0, its default): q/k/v are rows, not columns
        ({"sizes": (128, 64, 64), "split_dim": 0, "tokens": 128}, _split_dim_left_out),
    ],
    ids=["heads-1d", "view-size-keyword", "groups-16", "tokens-regrouped", "flat-user",
         "runtime-head-count", "heads-user", "biased-user", "scalar-add", "kv-sizes-differ",
         "four-way-split", "split-on-tokens"],
)  # fmt: skip
def test_near_misses_stay_unchanged(options, edit) -> None:
    _assert_unchanged(_run(_attention(**options), edit=edit))
    # ... and each is a candidate site (its rope is fed by q/k norms) reported as missed, once
    fn, inputs = _attention(**options)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    if edit is not None:
        edit(gm.graph)
    misses: list[tuple[str, str]] = []
    manager = GraphFusionPassManager(dtypes=["float32"], on_miss=lambda *c: misses.append(c))
    manager.run(gm.graph)
    assert manager.sites["qknorm_rope"] == {"expected": 1, "matched": 0}
    assert [name for name, _ in misses] == ["qknorm_rope"]


@pytest.mark.parametrize(
    "edit",
    [
        _keywords(A.rms_norm.default, ["eps"]),
        _keywords(A.rotary_embedding.default, ["head_size", "rotary_dim", "is_neox"]),
        _keywords(aten.split_with_sizes.default, ["dim"]),
    ],
    ids=["norm-eps", "rope-sizes", "split-dim"],
)
def test_arguments_passed_by_keyword_fuse(close, edit) -> None:
    line = _assert_fused(_run(_attention(), edit=edit), close)
    assert "128, 64, 32, 32, True, 1e-06" in line


def test_split_on_dim_one_of_a_2d_qkv_fuses(close) -> None:
    _assert_fused(_run(_attention(split_dim=1)), close)


def test_a_pattern_registered_for_a_dtype_the_soc_lacks_is_not_used(close) -> None:
    """A2 runs the kernel in bfloat16 only: a float32 pattern registered by hand must not
    fuse a float32 graph; the pass's own bfloat16 pattern fuses the bfloat16 graph."""
    geometry = {"head_dim": 128, "q_size": 512, "kv_size": 256}
    qk_pass = QKNormRopePass(soc="A2", shapes=[(128, 512, 256)], eps_values=[EPS])
    assert qk_pass.register(QKNormRopePattern(eps=EPS, dtype=torch.float32, bias=False,
                                              soc="A2", **geometry))  # fmt: skip
    _assert_unchanged(_run(_attention(hd=128), qk_pass=qk_pass))
    bf16 = _run(_attention(hd=128), qk_pass=qk_pass, dtype=torch.bfloat16)
    _assert_fused(bf16, close, torch.bfloat16)


FUSED_DEFAULT = "ascend.split_qkv_rmsnorm_rope.default"


def _site(hd: int = 32, heads: int = 4, kv_heads: int = 2, rotary_dim: int | None = None,
          bias: bool = False, dtype: torch.dtype = torch.float32):  # fmt: skip
    q_size, kv_size = heads * hd, kv_heads * hd
    rd = rotary_dim or hd

    def fn(qkv, qw, kw, positions, cache, *biases):  # type: ignore[no-untyped-def]
        q, k, v = qkv.split([q_size, kv_size, kv_size], -1)
        t = qkv.shape[0]
        qn = A.rms_norm(q.view(t, heads, hd), qw, 1e-6)
        kn = A.rms_norm(k.view(t, kv_heads, hd), kw, 1e-6)
        if biases:
            qn, kn = qn + biases[0], kn + biases[1]
        qr, kr = A.rotary_embedding(positions, qn.view(t, q_size), kn.view(t, kv_size), cache,
                                    hd, rd, True)  # fmt: skip
        return qr, kr, v

    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(5, q_size + 2 * kv_size, generator=gen),
              torch.rand(hd, generator=gen) + 0.5, torch.rand(hd, generator=gen) + 0.5,
              torch.tensor([0, 3, 7, 1, 15]), torch.randn(16, rd, generator=gen)]  # fmt: skip
    if bias:
        inputs += [0.1 * torch.randn(hd, generator=gen), 0.1 * torch.randn(hd, generator=gen)]
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in inputs]
    return fn, tuple(inputs)


def _trace(site) -> fx.GraphModule:  # type: ignore[no-untyped-def]
    fn, inputs = site
    return make_fx(fn, tracing_mode="fake")(*inputs)


def _rope(gm: fx.GraphModule) -> fx.Node:
    (node,) = gm.graph.find_nodes(op="call_function", target=A.rotary_embedding.default)
    return node


def _lines(gm: fx.GraphModule) -> list[str]:
    return [f"{n.op} {n.target} {n.args} {n.kwargs}" for n in gm.graph.nodes]


def _fused_args(gm: fx.GraphModule) -> tuple:
    (node,) = [n for n in gm.graph.nodes if str(n.target) == FUSED_DEFAULT]
    return node.args[5:11]


def _run_pass(gm: fx.GraphModule, qk_pass) -> int:  # type: ignore[no-untyped-def]
    count = qk_pass(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return count


def _assert_same(got, want) -> None:  # type: ignore[no-untyped-def]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rotary_dim", [32, 16])
def test_rope_arguments_by_keyword_fuse(rotary_dim: int) -> None:
    site = _site(rotary_dim=rotary_dim)
    gm = _trace(site)
    rope = _rope(gm)
    names = ("head_size", "rotary_dim", "is_neox")
    rope.kwargs = dict(zip(names, rope.args[4:], strict=True))
    rope.args = rope.args[:4]
    gm.recompile()
    assert _run_pass(gm, QKNormRopePass(eps_values=[1e-6], dtypes=["float32"])) == 1
    # q_size, kv_size, head_size, rotary_dim, is_neox, eps
    assert _fused_args(gm) == (128, 64, 32, rotary_dim, True, 1e-6)
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


def test_partial_rotary_keeps_the_head_size_from_the_head_size_argument() -> None:
    site = _site(rotary_dim=16)
    gm = _trace(site)
    assert _run_pass(gm, QKNormRopePass(eps_values=[1e-6], dtypes=["float32"])) == 1
    assert _fused_args(gm) == (128, 64, 32, 16, True, 1e-6)
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


@pytest.mark.parametrize("bias", [False, True])
def test_extract_reports_the_bias_and_default_soc_passes_the_capability_check(bias) -> None:
    gm = _trace(_site(bias=bias))
    match = QKNormRopePattern.extract(_rope(gm))
    assert match is not None
    assert match.attrs["bias"] is bias
    assert (match.attrs["q_size"], match.attrs["kv_size"], match.attrs["head_dim"]) == (128, 64, 32)
    pattern = QKNormRopePattern(eps=1e-6, dtype=torch.float32, bias=bias)
    assert pattern.context == {"soc": "cpu"}
    assert pattern.extra_check(match) is True


def test_a_pattern_registered_with_the_default_soc_fuses() -> None:
    class _OnePattern(PatternPass):
        name = "qknorm_rope"

    site = _site()
    gm = _trace(site)
    qk_pass = _OnePattern()
    qk_pass.register(QKNormRopePattern(eps=1e-6, dtype=torch.float32, bias=False, head_dim=32,
                                       q_size=128, kv_size=64))  # fmt: skip
    assert _run_pass(gm, qk_pass) == 1
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


def test_a_rope_result_used_whole_is_not_matched() -> None:
    gm = _trace(_site())
    rope = _rope(gm)
    output = next(iter(gm.graph.find_nodes(op="output")))
    output.args = ((*output.args[0], rope),)
    assert all(u.op == "output" or u.target is operator.getitem for u in rope.users)
    assert QKNormRopePattern.extract(rope) is None


@pytest.mark.parametrize(
    ("shapes", "fused"),
    [
        ([(32, 128, 64)], 1),
        ([(32, 64, 64)], 0),  # q_size differs
        ([(32, 128, 32)], 0),  # kv_size differs
        ([(32, 64, 64), (32, 128, 64)], 1),  # the second geometry matches
    ],
)
def test_registered_geometry_must_match_q_and_kv_sizes(shapes, fused: int) -> None:
    site = _site()
    gm = _trace(site)
    before = _lines(gm)
    assert _run_pass(gm, QKNormRopePass(shapes=shapes, dtypes=["float32"])) == fused
    if not fused:
        assert _lines(gm) == before
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


def test_an_unsupported_geometry_does_not_hide_the_next_one() -> None:
    # A2: bfloat16 with head size 64 or 128 only; 32 is skipped, 64 is registered
    site = _site(hd=64, heads=2, kv_heads=1, dtype=torch.bfloat16)
    gm = _trace(site)
    qk_pass = QKNormRopePass(shapes=[(32, 128, 64), (64, 128, 64)], dtypes=["bfloat16"],
                             soc="A2")  # fmt: skip
    assert len(qk_pass.patterns) == 4  # one geometry, two eps, with and without bias
    assert _run_pass(gm, qk_pass) == 1
    assert _fused_args(gm) == (128, 64, 64, 64, True, 1e-6)
    with torch.no_grad():
        for g, w in zip(gm(*site[1]), site[0](*site[1]), strict=True):
            torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
