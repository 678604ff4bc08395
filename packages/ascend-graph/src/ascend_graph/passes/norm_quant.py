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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class AddNormQuantSite(Match):
    """A quantisation of `add_rms_norm(...)[0]`, by the fused op's argument names.

    `norm` is the add_rms_norm, `quant` the quantisation (anchor), `residual_items` the users
    of the norm's new residual (getitem 1), `point` where the fused op goes."""

    x: Any
    residual: Any
    weight: Any
    eps: Any
    bias: Any
    norm: fx.Node
    quant: fx.Node
    residual_items: tuple[fx.Node, ...]
    point: fx.Node

    @property
    def attrs(self) -> dict[str, Any]:
        return {"eps": self.eps, "dtype": node_dtype(self.x), "bias": self.bias is not None}


@dataclass(frozen=True)
class AddNormStaticQuantSite(AddNormQuantSite):
    """An `AddNormQuantSite` whose quantisation is static: its scale and offset."""

    scale: Any
    offset: Any


def _add_norm(y: Any, allow_bias: bool) -> tuple[fx.Node, tuple[fx.Node, ...]] | None:
    """(add_rms_norm, users of its residual) when `y` = add_rms_norm(...)[0] is used once and
    the norm has the bias `allow_bias` permits; None when `y` is anything else."""
    norm = getitem_of(y, 0)
    if norm is None or not is_call(norm, ascend.add_rms_norm.default):
        return None
    items = getitems(norm)
    if len(items.get(0, [])) != 1 or set(items) - {0, 1}:
        return None
    if any(not is_call(u, operator.getitem) for u in norm.users):
        return None
    if arg(norm, 4, "bias") is not None and not allow_bias:
        return None
    return norm, tuple(items.get(1, []))


class _AddNormQuantBase(FusionPattern[AddNormQuantSite]):
    """Shared matching/rewriting of the add_rms_norm-then-quantise idioms."""

    fused: ClassVar[str] = ""
    quant_outputs: ClassVar[int] = 1  # outputs of the quantisation op (1 or 2)
    allow_bias: ClassVar[bool] = True

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """A quantisation of an add_rms_norm output."""
        return bool(anchor.args) and is_call(
            getitem_of(anchor.args[0], 0), ascend.add_rms_norm.default)

    @classmethod
    def extract(cls, anchor: fx.Node) -> AddNormQuantSite | None:
        y = anchor.args[0]
        if not isinstance(y, fx.Node) or sole_user(y) is not anchor:
            return None
        found = _add_norm(y, cls.allow_bias)
        if found is None:
            return None
        norm, residual_items = found
        if cls.quant_outputs == 1:
            quant_items: tuple[fx.Node, ...] = (anchor,)
        else:
            if any(not is_call(u, operator.getitem) for u in anchor.users):
                return None
            quant_items = tuple(anchor.users)
        x, residual, weight = norm.args[:3]
        bias = arg(norm, 4, "bias")
        static = cls.quant_outputs == 1  # quantize(y, scale, offset)
        extra = [arg(anchor, 1, "scale"), arg(anchor, 2, "offset")] if static else []
        point = insertion_point([*quant_items, *residual_items],
                                [x, residual, weight, bias, *extra])
        if point is None:
            return None
        nodes = (norm, y, anchor, *residual_items)
        if cls.quant_outputs == 2:
            nodes += quant_items
        common: dict[str, Any] = {
            "x": x, "residual": residual, "weight": weight, "eps": arg(norm, 3, "eps"),
            "bias": bias, "norm": norm, "quant": anchor, "residual_items": residual_items,
            "point": point,
        }  # fmt: skip
        if static:
            scale, offset = extra
            return AddNormStaticQuantSite(nodes, **common, scale=scale, offset=offset)
        return AddNormQuantSite(nodes, **common)

    def rewrite(self, graph: fx.Graph, site: AddNormQuantSite) -> None:
        quant, op = site.quant, ascend_op(self.fused)
        if self.quant_outputs == 1:
            vals = [quant.meta.get("val")]
        else:
            vals = [meta_item(quant, 0), meta_item(quant, 1)]
        outs = insert_fused(
            graph,
            site.point,
            op,
            site.arguments(op),
            [*vals, meta_item(site.norm, 1)],
            stream_label(site.nodes),
        )
        if self.quant_outputs == 1:
            quant.replace_all_uses_with(outs[0])
        else:
            redirect_getitems(quant, outs)
        for item in site.residual_items:
            item.replace_all_uses_with(outs[-1])
        erase_dead(site.nodes)


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


@dataclass(frozen=True)
class RmsNormMxQuantSite(Match):
    """`dynamic_mx_quant(rms_norm(x, weight, eps))`, by the fused op's argument names; `quant`
    is the quantisation (anchor), `point` where the fused op goes."""

    x: Any
    weight: Any
    eps: Any
    quant: fx.Node
    point: fx.Node

    @property
    def attrs(self) -> dict[str, Any]:
        return {"eps": self.eps, "dtype": node_dtype(self.x)}


class RmsNormDynamicMxQuantPattern(FusionPattern[RmsNormMxQuantSite]):
    """MX fp8: rms_norm (no residual) then dynamic_mx_quant."""

    anchors = ("dynamic_mx_quant",)

    def __init__(self, *, eps: float, dtype: torch.dtype) -> None:
        super().__init__(eps=eps, dtype=dtype)

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """An MX quantisation of an rms_norm output."""
        return bool(anchor.args) and is_call(anchor.args[0], ascend.rms_norm.default)

    @classmethod
    def extract(cls, anchor: fx.Node) -> RmsNormMxQuantSite | None:
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
        return RmsNormMxQuantSite((norm, anchor, *outputs), x=x, weight=weight,
                                  eps=arg(norm, 2, "eps"), quant=anchor, point=point)

    def rewrite(self, graph: fx.Graph, site: RmsNormMxQuantSite) -> None:
        op, quant = ascend_op("rms_norm_dynamic_mx_quant"), site.quant
        outs = insert_fused(
            graph,
            site.point,
            op,
            site.arguments(op),
            [meta_item(quant, 0), meta_item(quant, 1)],
            stream_label(site.nodes),
        )
        redirect_getitems(quant, outs)
        erase_dead(site.nodes)

    def example_inputs(self) -> tuple[Any, ...]:
        x, _, w = _norm_inputs(False)
        return _cast((x, w), self.settings["dtype"])

    def search(self, *inputs: Any) -> Any:
        x, w = inputs
        return ascend.dynamic_mx_quant(ascend.rms_norm(x, w, self.settings["eps"]))

    def replacement(self, *inputs: Any) -> Any:
        x, w = inputs
        return ascend.rms_norm_dynamic_mx_quant(x, w, self.settings["eps"])
