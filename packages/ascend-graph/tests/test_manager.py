"""GraphFusionPassManager: configuration, order, counts, uuid, keyed per-instance patterns."""

from __future__ import annotations

from pathlib import Path

import ascend_graph
import pytest
import torch
from ascend_graph import (
    PASS_NAMES,
    PASS_SWITCHES,
    SWITCH_DEFAULTS,
    GraphFusionPassManager,
)
from ascend_graph.passes.base import PatternPass
from ascend_graph.passes.fusion_passes import MulsAddPass, QKNormRopePass
from ascend_graph.passes.muls_add import MulsAddPattern
from ascend_graph.passes.qknorm_rope import QKNormRopePattern
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx


def test_pass_names_order_and_switches() -> None:
    assert PASS_NAMES == (
        "noop_elimination", "allgather_chunk_cleanup", "norm_quant", "qknorm_rope", "muls_add",
        "kv_cache_attention",
    )  # fmt: skip
    assert SWITCH_DEFAULTS == {
        "fuse_norm_quant": True, "fuse_qknorm_rope": True, "fuse_muls_add": True,
        "fuse_kv_cache_attention": True,
    }  # fmt: skip
    assert PASS_SWITCHES == {
        "norm_quant": "fuse_norm_quant", "qknorm_rope": "fuse_qknorm_rope",
        "muls_add": "fuse_muls_add", "kv_cache_attention": "fuse_kv_cache_attention",
    }  # fmt: skip
    # kv_cache_attention is on by default but runs only when its op handles are given
    assert GraphFusionPassManager().enabled == (
        "noop_elimination", "norm_quant", "qknorm_rope", "muls_add",
    )  # fmt: skip
    sp = GraphFusionPassManager(
        sequence_parallel=True, allgather_op=torch.ops.aten.clone.default,
        chunk_op=torch.ops.aten.alias.default, fuse_qknorm_rope=False,
    )  # fmt: skip
    assert sp.enabled == ("noop_elimination", "allgather_chunk_cleanup", "norm_quant", "muls_add")


def test_from_switches_takes_defaults_for_missing_keys() -> None:
    manager = GraphFusionPassManager.from_switches(
        {"fuse_muls_add": False, "enable_npugraph_ex": True}, soc="cpu"
    )
    assert manager.enabled == ("noop_elimination", "norm_quant", "qknorm_rope")
    with pytest.raises(ValueError, match="fuse_norm_quant must be true or false"):
        GraphFusionPassManager.from_switches({"fuse_norm_quant": "yes"})


def test_bad_arguments_name_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="allowed: A2, A3, A5, 310P, cpu"):
        GraphFusionPassManager(soc="910B")
    with pytest.raises(ValueError, match="muls_add_scale must be a number"):
        GraphFusionPassManager(muls_add_scale="2.5")
    with pytest.raises(ValueError, match="multiples of head_dim"):
        GraphFusionPassManager(qknorm_shapes=[(64, 100, 64)])
    with pytest.raises(ValueError, match="unknown make_backend config key"):
        ascend_graph.make_backend({"fuse_norm_qaunt": True})
    with pytest.raises(ValueError, match="allowed: eager, inductor, npugraph_ex"):
        ascend_graph.make_backend({"backend": "tvm"})
    with pytest.raises(TypeError, match=r"torch\.fx\.Graph"):
        GraphFusionPassManager().run("graph")  # type: ignore[arg-type]


def test_uuid_is_stable_and_changes_with_every_setting() -> None:
    base = GraphFusionPassManager().uuid()
    assert base == GraphFusionPassManager().uuid()
    variants = [
        {"fuse_norm_quant": False}, {"fuse_qknorm_rope": False}, {"fuse_muls_add": False},
        {"muls_add_scale": 2.5}, {"muls_add_scale": 1.5}, {"soc": "A5"}, {"w4a4": True},
        {"norm_eps": [1e-6]}, {"dtypes": ["bfloat16"]}, {"qknorm_shapes": [(64, 256, 128)]},
        {"qknorm_shapes": [(128, 256, 128)]},
    ]  # fmt: skip
    ids = {GraphFusionPassManager(**kw).uuid() for kw in variants}
    assert len(ids) == len(variants) and base not in ids
    manager = GraphFusionPassManager()
    before = manager.uuid()
    manager.passes[-1].register(MulsAddPattern(scale=3.0, dtype=torch.float32))
    assert manager.uuid() != before  # a later registration changes it too
    aten = torch.ops.aten

    def sp(gather, chunk):
        return GraphFusionPassManager(
            sequence_parallel=True, allgather_op=gather, chunk_op=chunk
        ).uuid()

    # the sequence-parallel op handles are settings too
    clone, alias = aten.clone.default, aten.alias.default
    sp_ids = {sp(clone, alias), sp(alias, clone)}
    assert len(sp_ids) == 2 and base not in sp_ids


def test_pattern_repr_shows_settings_and_context() -> None:
    muls = MulsAddPattern(scale=2.5, dtype=torch.float32)
    assert repr(muls) == "MulsAddPattern(scale=2.5, dtype=torch.float32)"
    qk = QKNormRopePattern(eps=1e-6, dtype=torch.bfloat16, bias=True, head_dim=128, soc="A2")
    assert repr(qk) == (
        "QKNormRopePattern(eps=1e-06, dtype=torch.bfloat16, bias=True, head_dim=128, "
        "q_size=None, kv_size=None, soc='A2')"
    )


def test_patterns_are_keyed_and_owned_by_the_instance() -> None:
    first, second = MulsAddPass(scale=2.5), MulsAddPass(scale=1.5)
    assert {p.settings["scale"] for p in first.patterns} == {2.5}
    assert {p.settings["scale"] for p in second.patterns} == {1.5}
    # same class and dtype, other scale: a different key, both registered
    assert first.register(MulsAddPattern(scale=1.5, dtype=torch.float32))
    assert not first.register(MulsAddPattern(scale=1.5, dtype=torch.float32))  # same key
    assert len(second.patterns) == 3  # unaffected by registrations on `first`
    keys = {p.key for p in QKNormRopePass(shapes=[(64, 256, 128), (32, 128, 64)]).patterns}
    assert len(keys) == 2 * 3 * 2 * 2  # eps x dtype x geometry x bias


def test_counts_accumulate_and_compile_range_gates() -> None:
    manager = GraphFusionPassManager(muls_add_scale=2.5, dtypes=["float32"])
    (pattern,) = manager.passes[-1].patterns

    def graph():
        return make_fx(pattern.search, tracing_mode="fake")(*pattern.example_inputs()).graph

    assert manager.run(graph())["muls_add"] == 1
    manager(graph())
    assert manager.counts["muls_add"] == 2 and manager.last_counts["muls_add"] == 1
    muls_add = manager.passes[-1]
    muls_add.max_tokens = 64
    assert muls_add.is_applicable_for_range((1, 64))
    assert not muls_add.is_applicable_for_range((1, 128))
    assert manager.run(graph(), compile_range=(1, 128))["muls_add"] == 0
    assert manager.run(graph(), compile_range=(1, 8))["muls_add"] == 1
    manager(graph(), (1, 128))  # the inductor-pass call honours the range too
    assert manager.last_counts["muls_add"] == 0
    manager(graph(), (1, 64))
    assert manager.last_counts["muls_add"] == 1
    with pytest.raises(TypeError, match="compile_range"):
        manager.is_applicable_for_range(object())


def _tuple(value):
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize(
    "settings",
    [
        {"dtypes": ["float32"]},
        {"dtypes": ["bfloat16"]},
        {"dtypes": ["float16"]},
        # configured scale and geometry: the patterns' own example values follow them
        {"dtypes": ["float32"], "muls_add_scale": 1.5, "qknorm_shapes": [(32, 64, 32)]},
    ],
    ids=["fp32", "bf16", "fp16", "configured"],
)
def test_every_pattern_matches_its_own_search_and_agrees_with_its_replacement(
    settings, close
) -> None:
    manager = GraphFusionPassManager(norm_eps=[2**-20], **settings)
    dtype = getattr(torch, settings["dtypes"][0])
    checked = 0
    for fusion in manager.passes[1:]:
        for pattern in fusion.patterns:
            inputs = pattern.example_inputs()
            assert {t.dtype for t in inputs if t.is_floating_point()} == {dtype}, pattern
            gm = make_fx(pattern.search, tracing_mode="fake")(*inputs)
            alone = PatternPass()  # this pattern only: no sibling may take its search
            alone.register(pattern)
            assert alone(gm.graph) == 1, pattern
            gm.recompile()
            want = _tuple(pattern.search(*inputs))
            close(_tuple(gm(*inputs)), want, dtype)
            close(_tuple(pattern.replacement(*inputs)), want, dtype)
            checked += 1
    assert checked == 6 + 2 + 1  # norm_quant variants, qknorm (bias or not), muls_add


@pytest.mark.parametrize(
    ("shape", "error"),
    [
        ((0, 64, 64), "multiples of head_dim"),  # head_dim at 0
        ((64, 128, 0), "multiples of head_dim"),  # kv_size at 0
        ((64, 0, 64), "multiples of head_dim"),  # q_size at 0
        ((64, 96, 64), "multiples of head_dim"),
        (("a", 1, 2), r"must be \(head_dim, q_size, kv_size\) integers"),
        ((64, 128), r"must be \(head_dim, q_size, kv_size\) integers"),
        ((1, 1, 1), None),  # the smallest geometry
        ((64, 128, 64), None),
    ],
)
def test_qknorm_shape_bounds(shape, error) -> None:
    if error is None:
        (pass_,) = [p for p in GraphFusionPassManager(qknorm_shapes=[shape]).passes
                    if p.name == "qknorm_rope"]  # fmt: skip
        assert pass_.geometries == [shape]
    else:
        with pytest.raises(ValueError, match=error):
            GraphFusionPassManager(qknorm_shapes=[shape])


@pytest.mark.parametrize("source", ["manager.py", "capability.py", "passes/muls_add.py"])
def test_uuid_changes_with_the_pass_source_code(monkeypatch, source) -> None:
    base = GraphFusionPassManager().uuid()
    read_bytes = Path.read_bytes

    def edited(path: Path) -> bytes:
        data = read_bytes(path)
        return data + b"\n# edited\n" if path.as_posix().endswith(source) else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    assert GraphFusionPassManager().uuid() != base


def test_settings_list_soc_w4a4_and_each_pass_with_its_bounds_and_patterns() -> None:
    manager = GraphFusionPassManager(soc="A3", w4a4=True, fuse_qknorm_rope=False,
                                     fuse_muls_add=False)
    settings = manager.settings()
    assert list(settings) == ["soc", "w4a4", "passes"]
    assert (settings["soc"], settings["w4a4"]) == ("A3", True)
    names = [p.name for p in manager.passes]
    assert [entry["name"] for entry in settings["passes"]] == names
    for entry, graph_pass in zip(settings["passes"], manager.passes, strict=True):
        assert entry["min_tokens"] is None and entry["max_tokens"] is None
        patterns = getattr(graph_pass, "_patterns", None)
        if patterns is None:
            assert set(entry) == {"name", "min_tokens", "max_tokens"}
        else:
            assert entry["patterns"] == [repr(k) for k in patterns] and entry["patterns"]
    # a pattern pass lists its registrations under "patterns"
    qknorm = QKNormRopePass(dtypes=["float32"], eps_values=[1e-6])
    assert qknorm.settings() == {
        "min_tokens": None, "max_tokens": None,
        "patterns": [repr(p.key) for p in qknorm.patterns],
    }  # fmt: skip
    assert len(qknorm.patterns) == 2  # with and without bias
    manager.passes[0].min_tokens, manager.passes[0].max_tokens = 2, 64
    bounded = manager.settings()["passes"][0]
    assert (bounded["min_tokens"], bounded["max_tokens"]) == (2, 64)


@pytest.mark.parametrize("switch", ["fuse_qknorm_rope", "fuse_muls_add", "w4a4",
                                    "sequence_parallel", "fuse_norm_quant"])
def test_a_switch_that_is_not_a_bool_is_named(switch: str) -> None:
    with pytest.raises(ValueError) as exc:
        GraphFusionPassManager(**{switch: "yes"})
    assert str(exc.value) == f"{switch} must be true or false, got 'yes'"


def test_last_counts_are_zero_for_every_pass_before_the_first_run() -> None:
    manager = GraphFusionPassManager()
    assert manager.last_counts == {name: 0 for name in PASS_NAMES}
    assert all(type(v) is int for v in manager.last_counts.values())


@pytest.mark.parametrize("soc", ["A2", "A3", "A5", "310P", "cpu"])
def test_every_pattern_pass_of_the_manager_gets_its_soc(soc: str) -> None:
    manager = GraphFusionPassManager(soc=soc, dtypes=["float16"])
    socs = {p.name: getattr(p, "soc", None) for p in manager.passes}
    assert socs == {"noop_elimination": None, "norm_quant": soc, "qknorm_rope": soc,
                    "muls_add": soc}


def _scaled_add(scale: float):  # type: ignore[no-untyped-def]
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * scale + y

    return fn


def _xy(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(4, 8, generator=gen).to(dtype), torch.randn(4, 8, generator=gen).to(dtype)


def _targets(gm: fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_from_switches_takes_muls_add_scale_from_the_mapping() -> None:
    manager = GraphFusionPassManager.from_switches({"muls_add_scale": 2.5, "enable_npugraph_ex": 1})
    x, y = _xy()
    hit = make_fx(_scaled_add(2.5))(x, y)
    miss = make_fx(_scaled_add(3.0))(x, y)
    before = _targets(miss)
    assert manager.run(miss)["muls_add"] == 0
    assert _targets(miss) == before
    assert manager.run(hit)["muls_add"] == 1
    assert _targets(hit) == ["ascend.muls_add.default"]
    hit.recompile()
    torch.testing.assert_close(hit(x, y), x * 2.5 + y)
    # kwargs win over the mapping
    manager = GraphFusionPassManager.from_switches({"muls_add_scale": 2.5}, muls_add_scale=3.0)
    assert manager.run(make_fx(_scaled_add(3.0))(x, y))["muls_add"] == 1


def test_run_accepts_a_graph_module_and_names_a_wrong_type() -> None:
    manager = GraphFusionPassManager()
    gm = make_fx(_scaled_add(2.0))(*_xy())
    assert manager.run(gm)["muls_add"] == 1
    assert _targets(gm) == ["ascend.muls_add.default"]
    with pytest.raises(TypeError, match=r"^expected a torch.fx.Graph, got str$"):
        manager.run("graph")  # type: ignore[arg-type]
