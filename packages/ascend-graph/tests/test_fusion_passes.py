"""The fusion passes: their arguments, and a catalogue of near-misses (graphs one detail away
from a fusion idiom) that must stay unfused.

Each row of `CATALOGUE` names the pass it nearly matches, why fusing it would be wrong, the
deviation (`miss`) and, where it marks the rule's boundary, the same site without that
deviation (`hit`), which must fuse. Sites are traced from small functions to ATen graphs:
with `make_fx` (static shapes, or a stream label put on some nodes afterwards), `fx` symbolic
tracing (call_method views), or `torch.compile` with the token dimension dynamic (SymInt
sizes, through `compile_graph`); conftest's `run_site` runs the passes on them.

A near-miss must leave the graph exactly as it was (same nodes, targets and arguments), every
pass must report 0 sites, and the graph run afterwards must give eager's outputs bit for bit.
A hit must report one site, for its pass only, and stay close to eager.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from ascend_graph import PASS_NAMES
from ascend_graph.capability import supports
from ascend_graph.passes.fusion_passes import NormQuantPass, as_dtype

A = torch.ops.ascend
F32, BF16 = torch.float32, torch.bfloat16


@dataclass
class Site:
    """A function, its inputs, and how to trace and fuse it."""

    fn: Callable[..., Any]
    inputs: tuple[Any, ...]
    manager: dict[str, Any] = field(default_factory=dict)  # GraphFusionPassManager kwargs
    trace: str = "make_fx"  # "make_fx" | "fx" | "dynamo"
    dynamic: tuple[int, ...] = ()  # "dynamo": inputs whose dim 0 (tokens) is dynamic
    streams: dict[str, str] = field(default_factory=dict)  # target substring ("*": all) -> label
    fused: str | None = None  # op a hit must produce


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# --- noop_elimination ------------------------------------------------------------------------


def noop_view(*, shape: Sequence[int], trace: str = "make_fx") -> Site:
    """`x.view(shape)` of a (4, 8) input."""
    return Site(lambda x: x.view(*shape) * 2, (_randn(4, 8),), trace=trace)


def noop_view_dtype() -> Site:
    """`x.view(int32)` of float32 x: same shape, the bits reinterpreted (call_method)."""
    return Site(lambda x: x.view(torch.int32) + 1, (_randn(4, 8),), trace="fx")


def noop_symbolic(*, swap: bool = False, cols: int | None = None) -> Site:
    """A view/reshape of an (s0, 8) input: (8, s0) when `swap`, (-1, cols) when `cols`."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        if cols is not None:
            return x.reshape(-1, cols) * 2
        return x.view(*(x.shape[::-1] if swap else x.shape)) * 2

    return Site(fn, (_randn(4, 8),), trace="dynamo", dynamic=(0,))


def noop_cast(*, dtype: torch.dtype) -> Site:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.prims.convert_element_type.default(x, dtype) * 2

    return Site(fn, (_randn(4, 8),))


# --- allgather_chunk_cleanup (stand-ins for vLLM's all_gather / sequence-parallel chunk) -----


def sp_cleanup(
    *, ops: Any, parts: int = 2, between: bool = False, dtype: torch.dtype | None = None,
    streams: dict[str, str] | None = None, dynamic: bool = False, pad: bool = False,
) -> Site:  # fmt: skip
    """`chunk(all_gather(x, 2), parts)` in a world of 2 (rank 0); `ops`: conftest's sp_ops.
    `pad` puts x below 4 rows of zeros instead of gathering it."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        gathered = torch.nn.functional.pad(x, (0, 0, 4, 0)) if pad else ops.all_gather(x, 2)
        if between:
            gathered = gathered.relu()
        return ops.chunk(gathered, parts, dtype) * 2

    manager = {
        "sequence_parallel": True,
        "allgather_op": ops.all_gather.default,
        "chunk_op": ops.chunk.default,
    }
    trace = "dynamo" if dynamic else "make_fx"
    return Site(fn, (_randn(4, 8),), manager, trace, (0,) if dynamic else (), streams or {})


# --- norm_quant ------------------------------------------------------------------------------


def norm_quant(
    *, quant: str = "static", bias: bool = False, eps: float = 1e-6, y_user: bool = False,
    cast: torch.dtype | None = None, scale_from_residual: bool = False,
    dtype: torch.dtype = F32, streams: dict[str, str] | None = None,
    manager: dict[str, Any] | None = None, dynamic: bool = False, source: str = "norm",
) -> Site:  # fmt: skip
    """`quant(add_rms_norm(x, r, w, eps[, b])[0])`; quant: "static", "dynamic" or "mx";
    "rms_mx" is `dynamic_mx_quant(rms_norm(x, w, eps))`. `source` "residual" quantises the
    norm's residual output instead, "torch_rms" the output of torch's own RMSNorm
    (`aten._fused_rms_norm`, which ATen graphs hold decomposed into pointwise ops), "sort"
    output 0 of `sort(y)`."""

    def fn(x, r, w, b, scale, offset):
        if quant == "rms_mx":
            y, res = A.rms_norm(x, w, eps), r
        else:
            y, res = A.add_rms_norm(x, r, w, eps, b if bias else None)
        if source == "residual":
            y, res = res, y
        elif source == "torch_rms":
            y = torch.ops.aten._fused_rms_norm(x, [64], w, eps)[0]
        elif source == "sort":
            y = torch.sort(y, -1)[0]
        extra = (y * 2,) if y_user else ()
        if cast is not None:
            y = y.to(cast)
        if scale_from_residual:
            scale = res.abs().amax().reshape(1) / 127
        if quant == "static":
            return A.quantize(y, scale, offset), res, *extra
        quantize = A.dynamic_quant if quant == "dynamic" else A.dynamic_mx_quant
        return *quantize(y), res, *extra

    inputs = (
        _randn(4, 64, seed=1, dtype=dtype), _randn(4, 64, seed=2, dtype=dtype),
        (torch.rand(64) + 0.5).to(dtype), 0.1 * _randn(64, seed=3, dtype=dtype),
        torch.tensor([0.02], dtype=dtype), torch.tensor([1.0], dtype=dtype),
    )  # fmt: skip
    fused = {
        "static": "add_rms_norm_quant", "dynamic": "add_rms_norm_dynamic_quant",
        "mx": "add_rms_norm_dynamic_mx_quant", "rms_mx": "rms_norm_dynamic_mx_quant",
    }[quant]  # fmt: skip
    trace = "dynamo" if dynamic else "make_fx"
    dims = (0, 1) if dynamic else ()
    return Site(fn, inputs, manager or {}, trace, dims, streams or {}, fused)


# --- qknorm_rope -----------------------------------------------------------------------------


def qknorm(
    *, eps: tuple[float, float] = (1e-6, 1e-6), bias: tuple[bool, bool] = (False, False),
    alpha: float = 1, k_chunk: int = 1, swap_rope: bool = False, norm_dim: int | None = None,
    head_dim: int = 32, cast: torch.dtype | None = None, q_heads_user: bool = False,
    q_item_user: bool = False, dtype: torch.dtype = F32, streams: dict[str, str] | None = None,
    manager: dict[str, Any] | None = None, dynamic: bool = False, batched: bool = False,
    bias_shape: str = "head", bias_dtype: torch.dtype | None = None,
) -> Site:  # fmt: skip
    """Packed qkv (4 q heads, 2 kv heads) -> split -> per-head RMSNorm [+ bias] -> rope.

    `k_chunk` 2 takes k from the third chunk (v from the second); `norm_dim` normalises
    groups of that width instead of whole heads; `cast` casts q and k before the norm;
    `batched` gives qkv a leading batch dimension of 1 that the head views flatten away;
    `bias_shape` "per_head" adds a [heads, head_dim] bias.
    """
    q_size, kv_size = 4 * head_dim, 2 * head_dim
    nd = norm_dim or head_dim
    compute = cast or dtype

    def side(x, t, w, b, eps_, has_bias):
        normed = A.rms_norm(x.to(compute).view(t, x.shape[-1] // nd, nd), w, eps_)
        return (torch.add(normed, b, alpha=alpha) if has_bias else normed), normed

    def fn(qkv, qw, kw, positions, cache, qb, kb):
        q, chunk1, chunk2 = qkv.split([q_size, kv_size, kv_size], dim=-1)
        k, v = (chunk1, chunk2) if k_chunk == 1 else (chunk2, chunk1)
        t = qkv.numel() // qkv.shape[-1]
        qn, q_heads = side(q, t, qw, qb, eps[0], bias[0])
        kn, _ = side(k, t, kw, kb, eps[1], bias[1])
        qf, kf = qn.view(t, q_size), kn.view(t, kv_size)
        if swap_rope:
            qf, kf = kf, qf
        qr, kr = A.rotary_embedding(positions, qf, kf, cache, head_dim, head_dim, True)
        extra = (q_heads * 2,) if q_heads_user else ((q * 2,) if q_item_user else ())
        return qr, kr, v, *extra

    qkv = _randn(5, q_size + 2 * kv_size, seed=4, dtype=dtype)
    per_head = bias_shape == "per_head"
    bias_type = bias_dtype or compute
    inputs = (
        qkv.unsqueeze(0) if batched else qkv,
        (torch.rand(nd) + 0.5).to(compute), (torch.rand(nd) + 0.5).to(compute),
        torch.tensor([0, 3, 7, 1, 15]), _randn(16, head_dim, seed=5, dtype=compute),
        0.1 * _randn(*((4,) if per_head else ()), nd, seed=6, dtype=bias_type),
        0.1 * _randn(*((2,) if per_head else ()), nd, seed=7, dtype=bias_type),
    )  # fmt: skip
    trace = "dynamo" if dynamic else "make_fx"
    dims = (0, 3) if dynamic else ()
    return Site(fn, inputs, manager or {}, trace, dims, streams or {}, "split_qkv_rmsnorm_rope")


# --- muls_add --------------------------------------------------------------------------------


def muls_add(
    *, scale: float = 2.5, alpha: float | None = None, tensor_scale: bool = False,
    product_user: bool = False, y_rows: int | None = None, y_dtype: torch.dtype = F32,
    cast: torch.dtype | None = None, streams: dict[str, str] | None = None,
    configured: float | None = 2.5, dynamic: bool = False,
) -> Site:  # fmt: skip
    """`y + x * scale` (add with `alpha` when given) under `muls_add_scale=configured`."""

    def fn(x, y, s):
        product = x * (s if tensor_scale else scale)
        out = product.to(cast) if cast is not None else product
        out = torch.add(y, out) if alpha is None else torch.add(y, out, alpha=alpha)
        return (out, product) if product_user else out

    rows = 4 if y_rows is None else y_rows
    inputs = (_randn(4, 64, seed=8), _randn(rows, 64, seed=9, dtype=y_dtype),
              torch.tensor(scale))  # fmt: skip
    trace = "dynamo" if dynamic else "make_fx"
    dims = ((0,) if y_rows is not None else (0, 1)) if dynamic else ()
    return Site(fn, inputs, {"muls_add_scale": configured}, trace, dims, streams or {},
                "muls_add")  # fmt: skip


# --- the catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    id: str
    pattern: str  # the pass whose idiom the site nearly matches
    why: str  # why fusing it would be wrong
    build: Callable[..., Site]
    miss: dict[str, Any]  # the near-miss: build(**miss)
    hit: dict[str, Any] | None = None  # the fusing counterpart, when it marks the boundary


DY = {"dynamic": True}
CATALOGUE: tuple[Row, ...] = (
    # noop_elimination: only a view to the input's own shape and a cast to its own dtype go
    Row("view-swaps-sizes", "noop_elimination", "(4, 8) -> (8, 4) keeps the rank, not the "
        "shape", noop_view, {"shape": (8, 4)}, {"shape": (4, 8)}),
    Row("view-flattens", "noop_elimination", "(4, 8) -> (32,) changes the rank",
        noop_view, {"shape": (32,)}),
    Row("method-view-swaps-sizes", "noop_elimination", "Tensor.view in an fx-traced graph: "
        "(8, 4) is another shape", noop_view, {"shape": (8, 4), "trace": "fx"},
        {"shape": (4, 8), "trace": "fx"}),
    Row("method-view-bitcast", "noop_elimination", "view(int32) keeps the shape but "
        "reinterprets the bits", noop_view_dtype, {}),
    Row("symbolic-view-swaps-sizes", "noop_elimination", "(s0, 8) -> (8, s0): equal only "
        "when s0 == 8, which is not known", noop_symbolic, {"swap": True}, {"swap": False}),
    Row("symbolic-reshape-rescales", "noop_elimination", "(s0, 8) -> (2*s0, 4) keeps the "
        "rank, not the sizes", noop_symbolic, {"cols": 4}, {"cols": 8}),
    Row("cast-changes-dtype", "noop_elimination", "float32 -> bfloat16 rounds the values",
        noop_cast, {"dtype": BF16}, {"dtype": F32}),
    # allgather_chunk_cleanup: chunk(all_gather(x)) is x only for this rank's whole slice
    Row("chunk-quarter", "allgather_chunk_cleanup", "a quarter of the gather is not x",
        sp_cleanup, {"parts": 4}, {"parts": 2}),
    Row("chunk-quarter-symbolic", "allgather_chunk_cleanup", "(2*s0)//4 rows are not s0 rows",
        sp_cleanup, {"parts": 4, **DY}, {"parts": 2, **DY}),
    Row("chunk-casts", "allgather_chunk_cleanup", "the chunk returns bfloat16, x is float32",
        sp_cleanup, {"dtype": BF16}, {"dtype": None}),
    Row("op-between-gather-and-chunk", "allgather_chunk_cleanup", "relu(gather) sliced is "
        "relu(x), not x", sp_cleanup, {"between": True}, {"between": False}),
    Row("chunk-of-another-op", "allgather_chunk_cleanup", "pad(x) has the gather's shape "
        "but its first half is zeros, not x", sp_cleanup, {"pad": True}, {"pad": False}),
    Row("gather-on-other-stream", "allgather_chunk_cleanup", "mixed streams: the chunk may "
        "run before the gather finished", sp_cleanup, {"streams": {"all_gather": "aux"}},
        {"streams": {"*": "aux"}}),
    # norm_quant
    Row("mx-with-bias", "norm_quant", "the MX fused kernel has no bias input: the bias would "
        "be dropped", norm_quant, {"quant": "mx", "bias": True}, {"quant": "mx"}),
    Row("mx-with-bias-symbolic", "norm_quant", "as mx-with-bias, token count symbolic",
        norm_quant, {"quant": "mx", "bias": True, **DY}, {"quant": "mx", **DY}),
    Row("quantise-the-residual", "norm_quant", "quantize(add_rms_norm(...)[1]) quantises the "
        "new residual; the fused kernel quantises the norm output", norm_quant,
        {"source": "residual"}, {"source": "norm"}),
    Row("quantise-torch-rms-norm", "norm_quant", "torch's own RMSNorm (decomposed, no "
        "residual) is not the ascend add_rms_norm the kernel replaces", norm_quant,
        {"source": "torch_rms"}, {"source": "norm"}),
    Row("quantise-another-ops-output-0", "norm_quant", "quantize(sort(y)[0]) quantises output "
        "0 of another two-output op, not of add_rms_norm", norm_quant, {"source": "sort"}, {}),
    Row("norm-output-extra-user", "norm_quant", "y is still needed unquantised elsewhere",
        norm_quant, {"y_user": True}, {"y_user": False}),
    Row("rms-norm-output-extra-user", "norm_quant", "the rms_norm output is still needed",
        norm_quant, {"quant": "rms_mx", "y_user": True}, {"quant": "rms_mx"}),
    Row("eps-not-registered", "norm_quant", "patterns are keyed by eps; 1e-3 is not one of "
        "the model's", norm_quant, {"quant": "dynamic", "eps": 1e-3},
        {"quant": "dynamic", "eps": 1e-5}),
    Row("cast-before-quant", "norm_quant", "the quantiser reads a bfloat16 copy of y",
        norm_quant, {"quant": "dynamic", "cast": BF16}, {"quant": "dynamic"}),
    Row("scale-from-residual", "norm_quant", "the scale needs the residual output: no place "
        "for one fused node", norm_quant, {"scale_from_residual": True}, {}),
    Row("quant-on-other-stream", "norm_quant", "mixed streams", norm_quant,
        {"quant": "dynamic", "streams": {"dynamic_quant": "aux"}},
        {"quant": "dynamic", "streams": {"*": "aux"}}),
    Row("rms-norm-on-other-stream", "norm_quant", "mixed streams", norm_quant,
        {"quant": "rms_mx", "streams": {"rms_norm": "aux"}},
        {"quant": "rms_mx", "streams": {"*": "aux"}}),
    Row("dtype-not-registered", "norm_quant", "float32 graph, patterns for bfloat16 only",
        norm_quant, {"manager": {"dtypes": ["bfloat16"]}}, {"manager": {"dtypes": ["float32"]}}),
    Row("mx-on-soc-without-mx", "norm_quant", "A2 has no MX kernels", norm_quant,
        {"quant": "mx", "dtype": BF16, "manager": {"soc": "A2"}},
        {"quant": "mx", "dtype": BF16, "manager": {"soc": "A5"}}),
    # qknorm_rope
    Row("eps-differs-per-side", "qknorm_rope", "the fused kernel takes one eps for q and k",
        qknorm, {"eps": (1e-6, 1e-5)}, {"eps": (1e-5, 1e-5)}),
    Row("eps-differs-per-side-symbolic", "qknorm_rope", "as eps-differs-per-side, tokens "
        "symbolic", qknorm, {"eps": (1e-6, 1e-5), **DY}, {"eps": (1e-5, 1e-5), **DY}),
    Row("bias-on-q-only", "qknorm_rope", "the kernel adds a bias to both sides or neither",
        qknorm, {"bias": (True, False)}, {"bias": (True, True)}),
    Row("bias-added-with-alpha", "qknorm_rope", "add(normed, b, alpha=2) adds 2*b", qknorm,
        {"bias": (True, True), "alpha": 2}, {"bias": (True, True), "alpha": 1}),
    Row("k-from-third-chunk", "qknorm_rope", "another split order: k is the third chunk, v "
        "the second", qknorm, {"k_chunk": 2}, {"k_chunk": 1}),
    Row("rope-arguments-swapped", "qknorm_rope", "k goes where rope expects q", qknorm,
        {"swap_rope": True}, {"swap_rope": False}),
    Row("norm-groups-not-heads", "qknorm_rope", "view to [T, 8, 16] keeps the rank but norms "
        "16-wide groups, rope uses 32-wide heads", qknorm, {"norm_dim": 16}, {"norm_dim": 32}),
    Row("norm-groups-not-heads-symbolic", "qknorm_rope", "as norm-groups-not-heads, tokens "
        "symbolic", qknorm, {"norm_dim": 16, **DY}, {"norm_dim": 32, **DY}),
    Row("bias-per-head", "qknorm_rope", "a [heads, head_dim] bias broadcasts in the graph; "
        "the kernel adds one [head_dim] bias to every head", qknorm,
        {"bias": (True, True), "bias_shape": "per_head"}, {"bias": (True, True)}),
    Row("bias-promotes-dtype", "qknorm_rope", "a float32 bias on bfloat16 heads promotes q "
        "and k to float32; the kernel returns bfloat16", qknorm,
        {"bias": (True, True), "dtype": BF16, "bias_dtype": F32},
        {"bias": (True, True), "dtype": BF16}),
    Row("qkv-batched", "qknorm_rope", "a [1, T, D] qkv flattened by the head views: the "
        "kernel takes a 2-D qkv (and v keeps the batch dim)", qknorm, {"batched": True}, {}),
    Row("cast-before-norm", "qknorm_rope", "q and k are normed in bfloat16, the kernel would "
        "norm the float32 qkv", qknorm, {"cast": BF16}, {}),
    Row("normed-q-extra-user", "qknorm_rope", "the normed q heads are needed elsewhere",
        qknorm, {"q_heads_user": True}, {}),
    Row("q-chunk-extra-user", "qknorm_rope", "the raw q chunk is needed elsewhere", qknorm,
        {"q_item_user": True}, {}),
    Row("rope-on-other-stream", "qknorm_rope", "mixed streams", qknorm,
        {"streams": {"rotary": "aux"}}, {"streams": {"*": "aux"}}),
    Row("head-size-not-on-soc", "qknorm_rope", "the A2 kernel needs head size 128", qknorm,
        {"dtype": BF16, "manager": {"soc": "A2"}},
        {"dtype": BF16, "head_dim": 128, "manager": {"soc": "A2"}}),
    # muls_add
    Row("add-alpha-2", "muls_add", "add(y, x*s, alpha=2) is y + 2*s*x", muls_add,
        {"alpha": 2}, {"alpha": 1}),
    Row("scale-is-a-tensor", "muls_add", "the kernel takes a constant scale", muls_add,
        {"tensor_scale": True}, {"tensor_scale": False}),
    Row("scale-not-configured", "muls_add", "1.5 is not the model's scale 2.5", muls_add,
        {"scale": 1.5}, {"scale": 2.5}),
    Row("product-extra-user", "muls_add", "x*s is needed elsewhere", muls_add,
        {"product_user": True}, {"product_user": False}),
    Row("add-broadcasts", "muls_add", "the kernel does not broadcast y", muls_add,
        {"y_rows": 1}, {"y_rows": 4}),
    Row("add-broadcasts-symbolic", "muls_add", "(s0, 64) + (1, 64) broadcasts", muls_add,
        {"y_rows": 1, **DY}, {**DY}),
    Row("add-promotes-dtype", "muls_add", "float32 x*s plus bfloat16 y: "
        "the add promotes, the kernel takes one dtype",
        muls_add, {"y_dtype": BF16}, {"y_dtype": F32}),
    Row("cast-before-add", "muls_add", "the product is rounded to bfloat16 before the add",
        muls_add, {"cast": BF16, "y_dtype": BF16}, {}),
    Row("add-on-other-stream", "muls_add", "mixed streams", muls_add,
        {"streams": {"add": "aux"}}, {"streams": {"*": "aux"}}),
)  # fmt: skip


def _flat(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Bit patterns of 1-byte floats (fp8 NaNs compare unequal as values)."""
    return t.view(torch.uint8) if t.dtype.itemsize == 1 and t.is_floating_point() else t


def eager(site: Site) -> Any:
    with torch.no_grad():
        return site.fn(*site.inputs)


def _site(row: Row, settings: dict[str, Any], sp_ops: Any) -> Site:
    context = {"ops": sp_ops} if row.build is sp_cleanup else {}
    return row.build(**settings, **context)


@pytest.mark.parametrize("row", CATALOGUE, ids=[r.id for r in CATALOGUE])
def test_near_miss_is_left_unchanged(row: Row, run_site, sp_ops) -> None:
    site = _site(row, row.miss, sp_ops)
    outcome = run_site(site)
    assert outcome.symbolic == (site.trace == "dynamo")
    assert outcome.after == outcome.before, f"{row.pattern} rewrote it: {row.why}"
    assert not any(outcome.report.values()), outcome.report
    assert outcome.meta_mismatches == []
    got, want = _flat(outcome.outputs), _flat(eager(site))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(_bits(g), _bits(w))


HITS = [r for r in CATALOGUE if r.hit is not None]


@pytest.mark.parametrize("row", HITS, ids=[r.id for r in HITS])
def test_counterpart_fuses(row: Row, run_site, sp_ops, close) -> None:
    assert row.hit is not None
    site = _site(row, row.hit, sp_ops)
    outcome = run_site(site)
    assert outcome.symbolic == (site.trace == "dynamo")
    assert outcome.report == {**dict.fromkeys(PASS_NAMES, 0), row.pattern: 1}
    assert outcome.meta_mismatches == []  # fused nodes carry their outputs' example values
    assert outcome.after != outcome.before
    if site.fused is not None:
        assert any(f"ascend.{site.fused}." in line for line in outcome.after)
    if "*" in site.streams:  # every node on one stream: the fused nodes stay on it
        assert outcome.labels == {site.streams["*"]}
    dtype = site.inputs[0].dtype
    close(outcome.outputs, eager(site), dtype)


def _mx(patterns: list[str]) -> list[str]:
    return [p for p in patterns if "MxQuant" in p]


@pytest.mark.parametrize("eps", [math.ulp(0.0), 1e-6, math.nextafter(1.0, 0.0)])
def test_eps_just_inside_zero_to_one_is_accepted(eps: float) -> None:
    assert NormQuantPass(eps_values=[eps], dtypes=["bfloat16"]).settings()["patterns"]


@pytest.mark.parametrize("eps", [[0.0], [1.0], [1.5], [1e-6, 1.0], []])
def test_eps_at_or_outside_zero_and_one_is_refused_by_name(eps: list[float]) -> None:
    with pytest.raises(ValueError) as exc:
        NormQuantPass(eps_values=eps)
    assert str(exc.value) == f"norm eps values must be in (0, 1), got {eps!r}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("bfloat16", torch.bfloat16), ("torch.float16", torch.float16),
     (torch.float32, torch.float32), ("torch.bfloat16", torch.bfloat16)],
)
def test_dtype_names_with_or_without_the_torch_prefix(value: object, expected: torch.dtype
                                                      ) -> None:
    assert as_dtype(value) is expected


@pytest.mark.parametrize("value", ["int8", "torch.int32", "no_such_dtype", "bool", "Tensor"])
def test_a_name_that_is_not_a_floating_dtype_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError) as exc:
        as_dtype(value)
    assert str(exc.value) == f"dtype {value!r} is not a floating torch dtype (e.g. 'bfloat16')"


def test_mx_patterns_follow_the_kernels_dtype_support() -> None:
    # A5's MX kernels take bf16/fp16 but not float32 (ascend_kernels' capability table).
    assert supports("rms_norm_dynamic_mx_quant", dtype=torch.float32, soc="A5") is False
    assert supports("rms_norm_dynamic_mx_quant", soc="A5") is True
    assert _mx(NormQuantPass(dtypes=["float32"], soc="A5").settings()["patterns"]) == []
    bf16 = _mx(NormQuantPass(dtypes=["bfloat16"], soc="A5").settings()["patterns"])
    assert len(bf16) == 2 * 2  # add+norm and norm alone, for each default eps
    assert _mx(NormQuantPass(dtypes=["bfloat16"], soc="A2").settings()["patterns"]) == []
