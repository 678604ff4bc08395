"""Small FX node predicates and rewrite helpers shared by the hand-written matchers."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

import torch
from torch import fx

aten = torch.ops.aten

# Both spellings appear: inductor's post-grad graphs hold `reshape` (view_to_reshape ran),
# graphs taken straight from aot_autograd hold `view` / `_unsafe_view`.
RESHAPE_TARGETS: frozenset[Any] = frozenset(
    {aten.reshape.default, aten.view.default, aten._unsafe_view.default}
)


def is_call(node: object, targets: Any) -> TypeGuard[fx.Node]:
    """True when `node` is a call_function node whose target is (one of) `targets`."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if isinstance(targets, (set, frozenset, tuple, list)):
        return node.target in targets
    return bool(node.target == targets)


def arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    """Argument `index` (positional) or `name` (keyword) of a call node."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def getitem_of(node: Any, index: int | None = None) -> fx.Node | None:
    """Parent node when `node` is `operator.getitem(parent, index)`, else None."""
    if not is_call(node, operator.getitem):
        return None
    if index is not None and node.args[1] != index:
        return None
    parent = node.args[0]
    return parent if isinstance(parent, fx.Node) else None


def getitems(node: fx.Node) -> dict[int, list[fx.Node]]:
    """The getitem users of a multi-output node, by index (an index may have several)."""
    found: dict[int, list[fx.Node]] = {}
    for user in node.users:
        index = user.args[1] if is_call(user, operator.getitem) else None
        if isinstance(index, int):
            found.setdefault(index, []).append(user)
    return found


def sole_user(node: object) -> fx.Node | None:
    """The only user of `node` (a node used exactly once), else None."""
    if not isinstance(node, fx.Node) or len(node.users) != 1:
        return None
    user = next(iter(node.users))
    return user if _use_count(node, user) == 1 else None


def _use_count(node: fx.Node, user: fx.Node) -> int:
    count = 0
    for a in (*user.args, *user.kwargs.values()):
        if a is node:
            count += 1
        elif isinstance(a, (list, tuple)):
            count += sum(1 for x in a if x is node)
    return count


def tensor_meta(node: Any) -> torch.Tensor | None:
    """The example value (usually a FakeTensor) recorded on a node, if any."""
    if not isinstance(node, fx.Node):
        return None
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def node_dtype(node: Any) -> torch.dtype | None:
    val = tensor_meta(node)
    return None if val is None else val.dtype


def static_int(value: Any) -> int | None:
    """`value` as a plain int when it is one (not a SymInt or a node)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Shapes provably equal (symbolic sizes only when the shape environment proves it)."""
    if a.dim() != b.dim():
        return False
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    for x, y in zip(a.shape, b.shape, strict=True):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif not statically_known_true(x == y):
            return False
    return True


def same_stream(nodes: Iterable[fx.Node]) -> bool:
    """Nodes may fuse only when they run on one stream.

    `meta["stream_label"]` None means the default stream; two different labels, or the default
    mixed with a non-default label, reject the match.
    """
    labels = {n.meta.get("stream_label") for n in nodes if n.op == "call_function"}
    return len(labels) <= 1


def stream_label(nodes: Sequence[fx.Node]) -> Any:
    for n in nodes:
        if n.op == "call_function":
            return n.meta.get("stream_label")
    return None


def all_before(inputs: Iterable[Any], point: fx.Node) -> bool:
    """Every node among `inputs` is defined before `point` in graph order."""
    return all(not isinstance(i, fx.Node) or i < point for i in inputs)


def insertion_point(outputs: Sequence[fx.Node], inputs: Iterable[Any]) -> fx.Node | None:
    """Where a fused node replacing `outputs` can go: before the first consumer of any of
    them (or after the last of them when none is consumed), provided every input is defined
    earlier. None when no such point exists."""
    consumers = [u for o in outputs for u in o.users]
    point = min(consumers) if consumers else max(outputs).next
    return point if all_before(inputs, point) else None


def propagate_meta(node: fx.Node, label: Any = None) -> None:
    """Fill `meta["val"]` of a freshly inserted node by running its target on fake inputs.

    Downstream inductor stages read `meta["val"]`; nodes whose inputs carry no fake value
    (e.g. a plain symbolic trace) are left without one, as their inputs are.
    """
    if label is not None:
        node.meta["stream_label"] = label
    if node.target is operator.getitem:
        parent_val = node.args[0].meta.get("val")  # type: ignore[union-attr]
        if isinstance(parent_val, (tuple, list)):
            node.meta["val"] = parent_val[node.args[1]]  # type: ignore[index]
        return
    missing = False

    def value(a: fx.Node) -> Any:
        nonlocal missing
        if "val" not in a.meta:
            missing = True
        return a.meta.get("val")

    args = fx.map_arg(node.args, value)
    kwargs = fx.map_arg(node.kwargs, value)
    if missing:
        return
    from torch._guards import detect_fake_mode
    from torch.utils._pytree import tree_leaves

    fake_mode = detect_fake_mode(tree_leaves((args, kwargs)))
    if fake_mode is None:
        return
    with fake_mode:
        node.meta["val"] = node.target(*args, **kwargs)  # type: ignore[operator]


def adopt_meta(fused: fx.Node, items: Sequence[fx.Node], vals: Sequence[Any], label: Any) -> None:
    """Give a fused node and its getitems the example values of the outputs they replace.

    The replaced nodes are erased, so their values are not shared; this avoids a fake-tensor
    run per rewrite (the dominant cost otherwise). Falls back to `propagate_meta` when a value
    is missing.
    """
    if any(not isinstance(v, torch.Tensor) for v in vals):
        propagate_meta(fused, label)
        for item in items:
            propagate_meta(item, label)
        return
    fused.meta["val"] = tuple(vals)
    for item, val in zip(items, vals, strict=True):
        item.meta["val"] = val
    for node in (fused, *items):
        if label is not None:
            node.meta["stream_label"] = label


def fresh_like(val: Any) -> Any:
    """A new contiguous fake tensor shaped like `val` (for an output that is no longer a view)."""
    mode = getattr(val, "fake_mode", None)
    if mode is None:
        return None
    with mode:
        return torch.empty_like(val, memory_format=torch.contiguous_format)


def meta_item(node: Any, index: int) -> Any:
    """Element `index` of a multi-output node's example value, if recorded."""
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val[index] if isinstance(val, (tuple, list)) and len(val) > index else None


def insert_fused(
    graph: fx.Graph,
    point: fx.Node,
    target: Any,
    args: tuple[Any, ...],
    vals: Sequence[Any],
    label: Any,
) -> list[fx.Node]:
    """Insert `target(*args)` before `point` with one getitem per output; return the getitems.

    `vals` are the example values of the outputs being replaced (see `adopt_meta`), `label`
    the matched nodes' stream label.
    """
    with graph.inserting_before(point):
        fused = graph.call_function(target, args)
        outs = [graph.call_function(operator.getitem, (fused, i)) for i in range(len(vals))]
    adopt_meta(fused, outs, vals, label)
    return outs


def redirect_getitems(node: fx.Node, outs: Sequence[fx.Node]) -> None:
    """Point every `getitem(node, i)` user of a multi-output node at `outs[i]`."""
    for index, items in getitems(node).items():
        for item in items:
            item.replace_all_uses_with(outs[index])


def erase_dead(nodes: Iterable[fx.Node]) -> None:
    """Erase matched nodes that lost all their users, consumers first."""
    for node in sorted(set(nodes), reverse=True):
        if not node.users and node.graph is not None:
            node.graph.erase_node(node)
