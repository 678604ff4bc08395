"""`x * scale + y` (scale: a Python number, e.g. the routed scaling factor) -> `ascend.muls_add`.

Idiom: `aten.mul.Tensor(x, scale)` (or `aten.mul.Scalar`) used only by `aten.add.Tensor` with
alpha 1, the product on either side of the add. x and y must have the same shape and dtype
when the graph records them (the fused kernel does not broadcast).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from ascend_graph.passes.base import FusionPattern, Match, ascend_op
from ascend_graph.passes.fx_nodes import (
    arg,
    erase_dead,
    is_call,
    node_dtype,
    same_shape,
    sole_user,
    stream_label,
    tensor_meta,
)
from ascend_graph.passes.sites import Miss

aten = torch.ops.aten
_MUL_TARGETS = frozenset({aten.mul.Tensor, aten.mul.Scalar})


def _scaled(node: Any, add: fx.Node) -> tuple[fx.Node, float] | None:
    """(x, scale) when `node` is `x * scale` used only by `add`."""
    if not is_call(node, _MUL_TARGETS) or sole_user(node) is not add:
        return None
    a, b = node.args[0], node.args[1]
    if isinstance(b, fx.Node):
        a, b = b, a  # scalar first: `scale * x`
    if not isinstance(a, fx.Node) or isinstance(b, bool) or not isinstance(b, (int, float)):
        return None
    return a, float(b)


def _is_floating(node: fx.Node) -> bool:
    val = tensor_meta(node)
    return val is not None and val.dtype.is_floating_point


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class MulsAddSite(Match):
    """`x * scale + y`, by `muls_add`'s argument names; `nodes` are (mul, add)."""

    x: fx.Node
    y: fx.Node
    scale: float

    @property
    def attrs(self) -> dict[str, Any]:
        return {"scale": self.scale, "dtype": node_dtype(self.x)}


class MulsAddPattern(FusionPattern[MulsAddSite]):
    """Keyed by scale (None = any constant) and dtype."""

    anchors = (aten.add.Tensor,)

    def __init__(self, *, scale: float | None, dtype: torch.dtype) -> None:
        super().__init__(scale=scale, dtype=dtype)

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """An add with an operand that is a floating-point product by a Python number (integer
        index arithmetic, e.g. a vocab-parallel embedding's offsets, is no muls_add site)."""
        return any(
            is_call(a, _MUL_TARGETS) and any(_is_number(b) for b in a.args[:2])
            and _is_floating(a)
            for a in anchor.args[:2]
        )

    @classmethod
    def diagnose(cls, anchor: fx.Node) -> Miss:
        if len(anchor.args) != 2 or arg(anchor, 2, "alpha", 1) != 1:
            return Miss.at(anchor, "the add is scaled (alpha != 1) or not binary")
        for mul in anchor.args:
            if is_call(mul, _MUL_TARGETS) and sole_user(mul) is not anchor:
                return Miss.at(mul, "the product has users besides the add")
        return Miss.at(anchor, "x, y and the sum differ in shape or dtype, or lack example "
                               "values (the fused kernel does not broadcast)")

    @classmethod
    def extract(cls, anchor: fx.Node) -> MulsAddSite | None:
        if len(anchor.args) != 2 or arg(anchor, 2, "alpha", 1) != 1:
            return None
        for mul, y in (anchor.args, anchor.args[::-1]):
            found = _scaled(mul, anchor)
            if found is None or not isinstance(mul, fx.Node) or not isinstance(y, fx.Node):
                continue
            x, scale = found
            xv, yv, ov = tensor_meta(x), tensor_meta(y), tensor_meta(anchor)
            if xv is None or yv is None or ov is None:
                return None
            if xv.dtype != yv.dtype or not same_shape(xv, yv) or not same_shape(xv, ov):
                return None
            return MulsAddSite((mul, anchor), x=x, y=y, scale=scale)
        return None

    def rewrite(self, graph: fx.Graph, site: MulsAddSite) -> None:
        mul, add = site.nodes
        op = ascend_op("muls_add")
        with graph.inserting_before(add):
            fused = graph.call_function(op, site.arguments(op))
        # extract() required the add's example value: the fused node produces exactly it
        fused.meta["val"] = add.meta["val"]
        label = stream_label(site.nodes)
        if label is not None:
            fused.meta["stream_label"] = label
        add.replace_all_uses_with(fused)
        erase_dead([mul, add])

    def _scale(self) -> float:
        return self.settings["scale"] if self.settings["scale"] is not None else 2.5

    def example_inputs(self) -> tuple[Any, ...]:
        gen = torch.Generator().manual_seed(0)
        dtype = self.settings["dtype"]
        return (torch.randn(2, 64, generator=gen).to(dtype), torch.randn(2, 64).to(dtype))

    def search(self, *inputs: Any) -> Any:
        x, y = inputs
        return x * self._scale() + y

    def replacement(self, *inputs: Any) -> Any:
        x, y = inputs
        return torch.ops.ascend.muls_add(x, y, self._scale())
