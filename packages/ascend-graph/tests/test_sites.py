"""Expected against matched sites: every pass run counts the candidate sites of its idiom and
the sites it rewrote, and a shortfall is one warning naming the pass and the node where
matching stopped. Graphs are traced with make_fx from functions that write the layers out."""

from __future__ import annotations

import logging

import torch
from ascend_graph import GraphFusionPassManager
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

A = torch.ops.ascend
HD, HEADS, KV_HEADS, EPS = 32, 4, 2, 1e-6
Q, KV = HEADS * HD, KV_HEADS * HD


def _layers(n: int, *, norms: bool = True, shared_norm: int | None = None):  # type: ignore[no-untyped-def]
    """`n` attention layers, each: split its qkv, [RMS-norm q and k per head,] rope. Layer
    `shared_norm` also returns its normed q, so that norm has a second user."""

    def fn(qkvs, qw, kw, positions, cache):  # type: ignore[no-untyped-def]
        outs = []
        for layer, qkv in enumerate(qkvs):
            q, k, v = qkv.split([Q, KV, KV], -1)
            t = qkv.shape[0]
            if norms:
                qn = A.rms_norm(q.view(t, HEADS, HD), qw, EPS)
                kn = A.rms_norm(k.view(t, KV_HEADS, HD), kw, EPS)
                q, k = qn.view(t, Q), kn.view(t, KV)
                if layer == shared_norm:
                    outs.append(qn * 2)
            outs += A.rotary_embedding(positions, q, k, cache, HD, HD, True)
            outs.append(v)
        return outs

    gen = torch.Generator().manual_seed(5)
    qkvs = [torch.randn(5, Q + 2 * KV, generator=gen) for _ in range(n)]
    inputs = (qkvs, torch.rand(HD, generator=gen) + 0.5, torch.rand(HD, generator=gen) + 0.5,
              torch.tensor([0, 3, 7, 1, 15]), torch.randn(16, HD, generator=gen))
    return make_fx(fn, tracing_mode="fake")(*inputs)


def _calls(graph: fx.Graph, op: object) -> list[fx.Node]:
    return list(graph.find_nodes(op="call_function", target=op))


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, name: str, message: str) -> None:
        self.calls.append((name, message))


def test_n_qk_norm_layers_are_n_expected_and_n_matched_sites() -> None:
    for n in (1, 3):
        gm = _layers(n)
        misses = _Recorder()
        manager = GraphFusionPassManager(dtypes=["float32"], on_miss=misses)
        manager.run(gm.graph)
        fused = _calls(gm.graph, A.split_qkv_rmsnorm_rope.default)
        assert len(fused) == n and not _calls(gm.graph, A.rotary_embedding.default)
        assert manager.sites["qknorm_rope"] == {"expected": n, "matched": n}
        assert manager.last_sites["qknorm_rope"].miss is None
        assert misses.calls == []


def test_ropes_without_qk_norms_expect_no_qknorm_rope_site() -> None:
    gm = _layers(2, norms=False)
    misses = _Recorder()
    manager = GraphFusionPassManager(dtypes=["float32"], on_miss=misses)
    manager.run(gm.graph)
    assert len(_calls(gm.graph, A.rotary_embedding.default)) == 2
    assert manager.sites["qknorm_rope"] == {"expected": 0, "matched": 0}
    assert misses.calls == []


def test_a_broken_site_is_one_warning_naming_the_pass_and_the_node() -> None:
    gm = _layers(3, shared_norm=1)
    (shared,) = [n for n in _calls(gm.graph, A.rms_norm.default) if len(n.users) == 2]
    misses = _Recorder()
    manager = GraphFusionPassManager(dtypes=["float32"], on_miss=misses)
    manager.run(gm.graph)
    assert len(_calls(gm.graph, A.split_qkv_rmsnorm_rope.default)) == 2
    assert manager.sites["qknorm_rope"] == {"expected": 3, "matched": 2}
    miss = manager.last_sites["qknorm_rope"].miss
    assert miss is not None and miss.node == shared.name
    assert miss.target == "ascend.rms_norm.default"
    assert "users besides the rope path" in miss.why
    ((name, message),) = misses.calls
    assert name == "qknorm_rope"
    assert message.startswith("Ascend fusion pass qknorm_rope rewrote 2 of 3 candidate sites")
    assert f"node {shared.name!r} (ascend.rms_norm.default)" in message


def test_the_default_warning_is_logged_once_per_pass(caplog) -> None:
    manager = GraphFusionPassManager(dtypes=["float32"])
    with caplog.at_level(logging.WARNING, logger="ascend_graph.manager"):
        for _ in range(2):
            manager.run(_layers(2, shared_norm=0).graph, compile_range=(1, 16))
    assert manager.sites["qknorm_rope"] == {"expected": 4, "matched": 2}
    assert manager.graphs_run == 2
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "qknorm_rope rewrote 1 of 2" in record.getMessage()
    assert "(compile range (1, 16))" in record.getMessage()


def test_a_site_no_pattern_accepts_names_what_it_holds() -> None:
    # The model's norm eps (1e-6) is not the one the manager registered patterns for.
    gm = _layers(1)
    misses = _Recorder()
    manager = GraphFusionPassManager(dtypes=["float32"], norm_eps=[1e-5], on_miss=misses)
    manager.run(gm.graph)
    assert manager.sites["qknorm_rope"] == {"expected": 1, "matched": 0}
    (rope,) = _calls(gm.graph, A.rotary_embedding.default)
    ((name, message),) = misses.calls
    assert name == "qknorm_rope" and f"node {rope.name!r}" in message
    assert "no registered pattern (of 2) accepts the site" in message and "eps=1e-06" in message


def test_muls_add_that_broadcasts_is_a_candidate_left_alone() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return x * 2.5 + y, x + y  # the second add has no product: no candidate

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(2, 64), torch.randn(64))
    (add, _) = _calls(gm.graph, torch.ops.aten.add.Tensor)
    misses = _Recorder()
    manager = GraphFusionPassManager(dtypes=["float32"], on_miss=misses)
    manager.run(gm.graph)
    assert manager.sites["muls_add"] == {"expected": 1, "matched": 0}
    ((name, message),) = misses.calls
    assert name == "muls_add" and f"node {add.name!r} (aten.add.Tensor)" in message
    assert "differ in shape or dtype" in message


def test_integer_index_arithmetic_is_no_muls_add_candidate() -> None:
    def fn(ids, start):  # type: ignore[no-untyped-def]
        return ids * 3 + start  # vocab-parallel embedding offsets: int64, not a muls_add site

    gm = make_fx(fn, tracing_mode="fake")(torch.arange(8), torch.arange(8))
    misses = _Recorder()
    manager = GraphFusionPassManager(dtypes=["float32"], on_miss=misses)
    manager.run(gm.graph)
    assert manager.sites["muls_add"] == {"expected": 0, "matched": 0}
    assert misses.calls == []


def test_muls_add_sites_are_counted_and_cleanups_expect_nothing() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return (x * 2.5 + y).view(2, 64) * 0.5 + x

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(2, 64), torch.randn(2, 64))
    misses = _Recorder()
    manager = GraphFusionPassManager(dtypes=["float32"], on_miss=misses)
    manager.run(gm.graph)
    assert len(_calls(gm.graph, A.muls_add.default)) == 2
    assert manager.sites["muls_add"] == {"expected": 2, "matched": 2}
    # the view to its own shape is removed, with no expectation to fall short of
    assert manager.sites["noop_elimination"] == {"expected": None, "matched": 1}
    assert misses.calls == []


def test_sites_cover_enabled_passes_and_graphs_run_starts_at_zero() -> None:
    manager = GraphFusionPassManager(fuse_muls_add=False)
    assert set(manager.sites) == {"noop_elimination", "norm_quant", "qknorm_rope"}
    assert manager.graphs_run == 0 and manager.last_sites == {}


def test_passes_with_candidates_start_at_zero_expected_sites() -> None:
    manager = GraphFusionPassManager()
    assert manager.sites == {"noop_elimination": {"expected": None, "matched": 0},
                             "norm_quant": {"expected": 0, "matched": 0},
                             "qknorm_rope": {"expected": 0, "matched": 0},
                             "muls_add": {"expected": 0, "matched": 0}}


def test_ascend_ops_count_the_calls_the_passes_were_given() -> None:
    # Per layer one q and one k norm and one rope (see `_layers`): counted before the fusion
    # replaced them, and summed over runs.
    manager = GraphFusionPassManager(dtypes=["float32"])
    assert manager.ascend_ops == {}
    manager.run(_layers(3).graph)
    assert manager.ascend_ops == {"ascend.rms_norm": 6, "ascend.rotary_embedding": 3}
    manager.run(_layers(1, norms=False).graph)
    assert manager.ascend_ops == {"ascend.rms_norm": 6, "ascend.rotary_embedding": 4}
