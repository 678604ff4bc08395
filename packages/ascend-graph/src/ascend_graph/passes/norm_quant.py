"""(add+)RMSNorm followed by quantisation -> one fused norm+quant kernel.

Idioms matched (post-grad ATen graphs; `y` = getitem 0 of `add_rms_norm`, used only by the
quantisation; getitem 1, the new residual, may have any users):

- static (+bias): `quantize(add_rms_norm(x, r, w, eps[, bias])[0], scale, offset)`
  -> `add_rms_norm_quant(x, r, w, scale, offset, eps, bias)`
- dynamic (+bias): `dynamic_quant(add_rms_norm(x, r, w, eps[, bias])[0])`
  -> `add_rms_norm_dynamic_quant(x, r, w, eps, bias)`
- MX: `dynamic_mx_quant(add_rms_norm(x, r, w, eps)[0])` -> `add_rms_norm_dynamic_mx_quant`
- RMSNorm+MX: `dynamic_mx_quant(rms_norm(x, w, eps))` -> `rms_norm_dynamic_mx_quant`
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar

import torch
from torch import fx

from ascend_graph.passes.base import FusionPattern, Match, ascend_op
from ascend_graph.passes.fx_nodes import (
    arg,
    erase_dead,
    getitem_of,
    getitems,
    insert_fused,
    insertion_point,
    is_call,
    meta_item,
    node_dtype,
    redirect_getitems,
    sole_user,
    stream_label,
)

ascend = torch.ops.ascend
_WIDTH = 64  # example hidden size: a multiple of the MX block (32)


def _add_norm_site(y: Any, allow_bias: bool) -> dict[str, Any] | None:
    """Decompose `y` = add_rms_norm(...)[0] used once; None when `y` is anything else."""
    norm = getitem_of(y, 0)
    if norm is None or not is_call(norm, ascend.add_rms_norm.default):
        return None
    items = getitems(norm)
    if len(items.get(0, [])) != 1 or set(items) - {0, 1}:
        return None
    if any(not is_call(u, operator.getitem) for u in norm.users):
        return None
    bias = arg(norm, 4, "bias")
    if bias is not None and not allow_bias:
        return None
    return {
        "norm": norm,
        "x": norm.args[0],
        "residual": norm.args[1],
        "weight": norm.args[2],
        "eps": arg(norm, 3, "eps"),
        "bias": bias,
        "residual_items": items.get(1, []),
    }


class _AddNormQuantBase(FusionPattern):
    """Shared matching/rewriting of the add_rms_norm-then-quantise idioms."""

    fused: ClassVar[str] = ""
    quant_outputs: ClassVar[int] = 1  # outputs of the quantisation op (1 or 2)
    allow_bias: ClassVar[bool] = True

    @classmethod
    def _quant_extra_args(cls, quant: fx.Node) -> list[Any]:
        return []

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """A quantisation of an add_rms_norm output."""
        return bool(anchor.args) and is_call(
            getitem_of(anchor.args[0], 0), ascend.add_rms_norm.default)

    @classmethod
    def extract(cls, anchor: fx.Node) -> Match | None:
        y = anchor.args[0]
        if sole_user(y) is not anchor:
            return None
        site = _add_norm_site(y, cls.allow_bias)
        if site is None:
            return None
        if cls.quant_outputs == 1:
            quant_items: list[fx.Node] = [anchor]
        else:
            if any(not is_call(u, operator.getitem) for u in anchor.users):
                return None
            quant_items = [u for u in anchor.users]
        extra = cls._quant_extra_args(anchor)
        inputs = [site["x"], site["residual"], site["weight"], site["bias"], *extra]
        point = insertion_point([*quant_items, *site["residual_items"]], inputs)
        if point is None:
            return None
        nodes = [site["norm"], y, anchor, *site["residual_items"]]
        if cls.quant_outputs == 2:
            nodes += quant_items
        attrs = {
            "eps": site["eps"],
            "dtype": node_dtype(site["x"]),
            "bias": site["bias"] is not None,
        }
        return Match(nodes, attrs, {**site, "quant": anchor, "extra": extra, "point": point})

    def _fused_args(self, v: dict[str, Any]) -> tuple[Any, ...]:
        raise NotImplementedError

    def rewrite(self, graph: fx.Graph, match: Match) -> None:
        v = match.values
        quant = v["quant"]
        if self.quant_outputs == 1:
            vals = [quant.meta.get("val")]
        else:
            vals = [meta_item(quant, 0), meta_item(quant, 1)]
        outs = insert_fused(
            graph,
            v["point"],
            ascend_op(self.fused),
            self._fused_args(v),
            [*vals, meta_item(v["norm"], 1)],
            stream_label(match.nodes),
        )
        if self.quant_outputs == 1:
            quant.replace_all_uses_with(outs[0])
        else:
            redirect_getitems(quant, outs)
        for item in v["residual_items"]:
            item.replace_all_uses_with(outs[-1])
        erase_dead(match.nodes)


def _norm_inputs(bias: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, _WIDTH, generator=gen)
    residual = torch.randn(4, _WIDTH, generator=gen)
    weight = torch.rand(_WIDTH, generator=gen) + 0.5
    b = torch.randn(_WIDTH, generator=gen) * 0.1
    return (x, residual, weight, b) if bias else (x, residual, weight)


def _cast(inputs: tuple[torch.Tensor, ...], dtype: torch.dtype) -> tuple[Any, ...]:
    return tuple(t.to(dtype) for t in inputs)


class AddRmsNormQuantPattern(_AddNormQuantBase):
    """Static per-tensor int8: add_rms_norm (+bias) then quantize."""

    anchors = ("quantize",)
    fused = "add_rms_norm_quant"

    def __init__(self, *, eps: float, dtype: torch.dtype, bias: bool) -> None:
        super().__init__(eps=eps, dtype=dtype, bias=bias)

    @classmethod
    def _quant_extra_args(cls, quant: fx.Node) -> list[Any]:
        return [quant.args[1], quant.args[2]]

    def _fused_args(self, v: dict[str, Any]) -> tuple[Any, ...]:
        scale, offset = v["extra"]
        return (v["x"], v["residual"], v["weight"], scale, offset, v["eps"], v["bias"])

    def example_inputs(self) -> tuple[Any, ...]:
        base = _norm_inputs(self.settings["bias"])
        q = (torch.tensor([0.05]), torch.tensor([1.0]))
        return (*_cast(base, self.settings["dtype"]), *_cast(q, self.settings["dtype"]))

    def _split(self, inputs: tuple[Any, ...]) -> tuple[Any, Any, Any, Any, Any, Any]:
        if self.settings["bias"]:
            x, r, w, b, scale, offset = inputs
        else:
            (x, r, w, scale, offset), b = inputs, None
        return x, r, w, b, scale, offset

    def search(self, *inputs: Any) -> Any:
        x, r, w, b, scale, offset = self._split(inputs)
        y, res = ascend.add_rms_norm(x, r, w, self.settings["eps"], b)
        return ascend.quantize(y, scale, offset), res

    def replacement(self, *inputs: Any) -> Any:
        x, r, w, b, scale, offset = self._split(inputs)
        return ascend.add_rms_norm_quant(x, r, w, scale, offset, self.settings["eps"], b)


class AddRmsNormDynamicQuantPattern(_AddNormQuantBase):
    """Per-token dynamic int8: add_rms_norm (+bias) then dynamic_quant."""

    anchors = ("dynamic_quant",)
    fused = "add_rms_norm_dynamic_quant"
    quant_outputs = 2

    def __init__(self, *, eps: float, dtype: torch.dtype, bias: bool) -> None:
        super().__init__(eps=eps, dtype=dtype, bias=bias)

    def _fused_args(self, v: dict[str, Any]) -> tuple[Any, ...]:
        return (v["x"], v["residual"], v["weight"], v["eps"], v["bias"])

    def example_inputs(self) -> tuple[Any, ...]:
        return _cast(_norm_inputs(self.settings["bias"]), self.settings["dtype"])

    def search(self, *inputs: Any) -> Any:
        x, r, w, *b = inputs
        y, res = ascend.add_rms_norm(x, r, w, self.settings["eps"], b[0] if b else None)
        q, scale = ascend.dynamic_quant(y)
        return q, scale, res

    def replacement(self, *inputs: Any) -> Any:
        x, r, w, *b = inputs
        return ascend.add_rms_norm_dynamic_quant(x, r, w, self.settings["eps"], b[0] if b else None)


class AddRmsNormDynamicMxQuantPattern(_AddNormQuantBase):
    """MX fp8 (block scales): add_rms_norm (no bias) then dynamic_mx_quant."""

    anchors = ("dynamic_mx_quant",)
    fused = "add_rms_norm_dynamic_mx_quant"
    quant_outputs = 2
    allow_bias = False

    def __init__(self, *, eps: float, dtype: torch.dtype) -> None:
        super().__init__(eps=eps, dtype=dtype)

    def _fused_args(self, v: dict[str, Any]) -> tuple[Any, ...]:
        return (v["x"], v["residual"], v["weight"], v["eps"])

    def example_inputs(self) -> tuple[Any, ...]:
        return _cast(_norm_inputs(False), self.settings["dtype"])

    def search(self, *inputs: Any) -> Any:
        x, r, w = inputs
        y, res = ascend.add_rms_norm(x, r, w, self.settings["eps"])
        q, scale = ascend.dynamic_mx_quant(y)
        return q, scale, res

    def replacement(self, *inputs: Any) -> Any:
        x, r, w = inputs
        return ascend.add_rms_norm_dynamic_mx_quant(x, r, w, self.settings["eps"])


class RmsNormDynamicMxQuantPattern(FusionPattern):
    """MX fp8: rms_norm (no residual) then dynamic_mx_quant."""

    anchors = ("dynamic_mx_quant",)

    def __init__(self, *, eps: float, dtype: torch.dtype) -> None:
        super().__init__(eps=eps, dtype=dtype)

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """An MX quantisation of an rms_norm output."""
        return bool(anchor.args) and is_call(anchor.args[0], ascend.rms_norm.default)

    @classmethod
    def extract(cls, anchor: fx.Node) -> Match | None:
        norm = anchor.args[0]
        if not is_call(norm, ascend.rms_norm.default) or sole_user(norm) is not anchor:
            return None
        if any(not is_call(u, operator.getitem) for u in anchor.users):
            return None
        x, weight = norm.args[0], norm.args[1]
        outputs = list(anchor.users)
        point = insertion_point(outputs or [anchor], [x, weight])
        if point is None:
            return None
        attrs = {"eps": arg(norm, 2, "eps"), "dtype": node_dtype(x)}
        values = {"x": x, "weight": weight, "eps": attrs["eps"], "point": point}
        return Match([norm, anchor, *outputs], attrs, values)

    def rewrite(self, graph: fx.Graph, match: Match) -> None:
        v, anchor = match.values, match.nodes[1]
        outs = insert_fused(
            graph,
            v["point"],
            ascend.rms_norm_dynamic_mx_quant.default,
            (v["x"], v["weight"], v["eps"]),
            [meta_item(anchor, 0), meta_item(anchor, 1)],
            stream_label(match.nodes),
        )
        redirect_getitems(anchor, outs)
        erase_dead(match.nodes)

    def example_inputs(self) -> tuple[Any, ...]:
        x, _, w = _norm_inputs(False)
        return _cast((x, w), self.settings["dtype"])

    def search(self, *inputs: Any) -> Any:
        x, w = inputs
        return ascend.dynamic_mx_quant(ascend.rms_norm(x, w, self.settings["eps"]))

    def replacement(self, *inputs: Any) -> Any:
        x, w = inputs
        return ascend.rms_norm_dynamic_mx_quant(x, w, self.settings["eps"])
