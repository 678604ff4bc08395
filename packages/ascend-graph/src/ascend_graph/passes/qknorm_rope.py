"""Qwen3-style q/k RMSNorm + RoPE on a packed qkv -> `ascend.split_qkv_rmsnorm_rope`.

Idiom matched, per side (q = split output 0, k = split output 1), ending at one
`ascend.rotary_embedding(positions, q, k, cos_sin_cache, head_size, rotary_dim, is_neox)`:

    split_with_sizes(qkv, [q_size, kv_size, kv_size], -1)[i]    # one split with three getitems
      -> reshape/view to [T, heads, head_size]                   # (bf16) or one split per getitem
      -> ascend.rms_norm(x, weight, eps)                         # (fp32): both accepted
      [-> aten.add.Tensor(normed, bias)]                         # the with-bias variant
      -> reshape/view to [T, heads * head_size]

v is getitem 2 of a split of the same qkv with the same sizes. Every intermediate must be used
only by the next step, both norms must share eps, and both sides must agree on the bias.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from ascend_graph.capability import supports
from ascend_graph.passes.base import FusionPattern, Match, ascend_op
from ascend_graph.passes.fx_nodes import (
    RESHAPE_TARGETS,
    arg,
    erase_dead,
    fresh_like,
    getitem_of,
    getitems,
    insert_fused,
    insertion_point,
    is_call,
    meta_item,
    node_dtype,
    redirect_getitems,
    sole_user,
    static_int,
    stream_label,
    tensor_meta,
)
from ascend_graph.passes.sites import Miss, why_not

aten = torch.ops.aten
ascend = torch.ops.ascend
FUSED_OP = "split_qkv_rmsnorm_rope"


SplitSignature = tuple[fx.Node, tuple[int, int, int]]


@dataclass(frozen=True)
class NormedSide:
    """q or k of a site: split getitem -> per-head view -> rms_norm (+ bias) -> flat view."""

    signature: SplitSignature
    split: fx.Node
    weight: Any
    eps: Any
    bias: Any
    nodes: tuple[fx.Node, ...]


@dataclass(frozen=True)
class QKNormRopeSite(Match):
    """A q/k norm + rope site, by the fused op's argument names where it has them."""

    qkv: fx.Node
    q: NormedSide
    k: NormedSide
    positions: Any
    cos_sin_cache: Any
    head_size: int
    rotary_dim: Any
    is_neox: Any
    dtype: torch.dtype | None
    rope: fx.Node
    v_items: tuple[fx.Node, ...]
    point: fx.Node

    @property
    def q_size(self) -> int:
        return self.q.signature[1][0]

    @property
    def kv_size(self) -> int:
        return self.q.signature[1][1]

    @property
    def q_weight(self) -> Any:
        return self.q.weight

    @property
    def k_weight(self) -> Any:
        return self.k.weight

    @property
    def q_bias(self) -> Any:
        return self.q.bias

    @property
    def k_bias(self) -> Any:
        return self.k.bias

    @property
    def eps(self) -> Any:
        return self.q.eps  # the same as k's (checked by the matcher)

    @property
    def attrs(self) -> dict[str, Any]:
        return {
            "eps": self.eps,
            "dtype": self.dtype,
            "bias": self.q.bias is not None,
            "head_dim": self.head_size,
            "q_size": self.q_size,
            "kv_size": self.kv_size,
        }


def _split_signature(split: Any) -> SplitSignature | None:
    """(qkv, sizes) of a 3-way last-dim split_with_sizes, else None."""
    if not is_call(split, aten.split_with_sizes.default):
        return None
    qkv, sizes = split.args[0], split.args[1]
    if not isinstance(sizes, (list, tuple)):
        return None
    dim = arg(split, 2, "dim", 0)
    sizes_t = tuple(static_int(s) for s in sizes)
    if len(sizes_t) != 3 or None in sizes_t or sizes_t[1] != sizes_t[2]:
        return None
    q_size, kv_size, v_size = (s for s in sizes_t if s is not None)
    # The fused kernel takes a [T, q_size + 2 * kv_size] qkv: a batched (3-D) qkv flattened
    # by the head views would reach it with the wrong rank.
    qkv_val = tensor_meta(qkv)
    if not isinstance(qkv, fx.Node) or qkv_val is None or qkv_val.dim() != 2 or dim not in (-1, 1):
        return None
    return (qkv, (q_size, kv_size, v_size))


def _last_dims(node: fx.Node, count: int) -> tuple[int | None, ...] | None:
    """The last `count` output sizes of a reshape, from its meta or its shape argument."""
    val = tensor_meta(node)
    if val is not None:
        return tuple(static_int(d) for d in val.shape[-count:]) if val.dim() >= count else None
    shape = node.args[1] if len(node.args) > 1 else None
    if not isinstance(shape, (list, tuple)) or len(shape) < count:
        return None
    return tuple(static_int(d) for d in shape[-count:])


def _head_bias(bias: Any, normed: Any, head_size: int) -> bool:
    """`bias` is a [head_size] tensor of the norm output's dtype, as the fused kernel takes it
    (a per-head [heads, head_size] bias broadcasts in the graph; another dtype promotes)."""
    bias_val, normed_val = tensor_meta(bias), tensor_meta(normed)
    if bias_val is None or normed_val is None or bias_val.dtype != normed_val.dtype:
        return False
    return tuple(static_int(d) for d in bias_val.shape) == (head_size,)


def _side(flat: Any, rope: fx.Node, index: int, head_size: int) -> NormedSide | Miss:
    """Walk back from rope input `flat` to the split getitem; the first deviation as a Miss."""
    side = "qk"[index]
    if not is_call(flat, RESHAPE_TARGETS):
        return why_not(flat, f"a reshape/view feeding the rope's {side}")
    if sole_user(flat) is not rope:
        return Miss.at(flat, f"the {side} reshape has users besides the rope")
    normed, bias, add = flat.args[0], None, None
    if is_call(normed, aten.add.Tensor):
        add = normed
        if sole_user(add) is not flat or len(add.args) != 2 or arg(add, 2, "alpha", 1) != 1:
            return Miss.at(add, f"the {side} bias add is shared, scaled or not binary")
        normed, bias = add.args
        if not _head_bias(bias, normed, head_size):
            return Miss.at(add, f"the {side} bias is not a [head_size] tensor of the norm's dtype")
    if not is_call(normed, ascend.rms_norm.default):
        return why_not(normed, f"ascend.rms_norm before the {side} reshape")
    if sole_user(normed) is not (add or flat):
        return Miss.at(normed, f"the {side} norm has users besides the rope path")
    heads = normed.args[0]
    if not is_call(heads, RESHAPE_TARGETS) or sole_user(heads) is not normed:
        return why_not(heads, f"a per-head reshape used only by the {side} norm")
    item = heads.args[0]
    split = getitem_of(item, index)
    if split is None or not isinstance(item, fx.Node) or sole_user(item) is not heads:
        return why_not(item, f"getitem {index} of a split, used only by the {side} reshape")
    signature = _split_signature(split)
    if signature is None:
        return Miss.at(split, "not a 3-way last-dim split_with_sizes of a 2-D qkv "
                              "with equal k and v sizes")
    size = signature[1][index]
    head_dims, flat_dims = _last_dims(heads, 2), _last_dims(flat, 1)
    if head_dims is None or head_dims[1] != head_size or head_dims[0] is None:
        return Miss.at(heads, f"the {side} head view is not [T, heads, {head_size}]")
    if head_dims[0] * head_size != size or flat_dims != (size,):
        return Miss.at(heads, f"the {side} views do not cover the split's {size} columns")
    nodes = (item, heads, normed, flat) + ((add,) if add is not None else ())
    return NormedSide(signature, split, normed.args[1], arg(normed, 2, "eps"), bias, nodes)


def _feeds_from_norm(value: Any) -> bool:
    """True when `value` comes from an ascend.rms_norm through at most a reshape and a bias
    add (the rope input of a model with q/k norms)."""
    for _ in range(3):
        if is_call(value, ascend.rms_norm.default):
            return True
        if not is_call(value, RESHAPE_TARGETS | {aten.add.Tensor}):
            return False
        value = value.args[0]
    return is_call(value, ascend.rms_norm.default)


class QKNormRopePattern(FusionPattern[QKNormRopeSite]):
    """Keyed by eps, dtype, head size, q/kv sizes (None = any) and bias; SoC in the context."""

    anchors = ("rotary_embedding",)

    def __init__(
        self,
        *,
        eps: float,
        dtype: torch.dtype,
        bias: bool,
        head_dim: int | None = None,
        q_size: int | None = None,
        kv_size: int | None = None,
        soc: str = "cpu",
    ) -> None:
        super().__init__(
            context={"soc": soc},
            eps=eps,
            dtype=dtype,
            bias=bias,
            head_dim=head_dim,
            q_size=q_size,
            kv_size=kv_size,
        )

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """A rope whose q or k input is RMS-normed: the model has q/k norms."""
        return any(_feeds_from_norm(a) for a in anchor.args[1:3])

    @classmethod
    def diagnose(cls, anchor: fx.Node) -> Miss:
        found = cls._sides(anchor)
        if isinstance(found, Miss):
            return found
        return Miss.at(anchor, "the q/k sides match but v or the fused op's insertion point "
                               "does not (v split differs, or an input is defined too late)")

    @classmethod
    def _sides(cls, anchor: fx.Node) -> tuple[NormedSide, NormedSide] | Miss:
        """Both matched sides of the rope at `anchor`, or where matching stopped."""
        head_size = static_int(arg(anchor, 4, "head_size"))
        if head_size is None:
            return Miss.at(anchor, "the rope's head_size is not a static integer")
        if any(not is_call(u, operator.getitem) for u in anchor.users):
            return Miss.at(anchor, "the rope has a user that is not a getitem")
        q = _side(anchor.args[1], anchor, 0, head_size)
        if isinstance(q, Miss):
            return q
        k = _side(anchor.args[2], anchor, 1, head_size)
        if isinstance(k, Miss):
            return k
        if q.signature != k.signature or q.eps != k.eps:
            return Miss.at(anchor, "q and k come from different splits or norm eps values")
        if (q.bias is None) != (k.bias is None):
            return Miss.at(anchor, "only one of q and k has a bias")
        return q, k

    @classmethod
    def extract(cls, anchor: fx.Node) -> QKNormRopeSite | None:
        positions, _, _, cache = anchor.args[:4]
        sides = cls._sides(anchor)
        head_size = static_int(arg(anchor, 4, "head_size"))
        if isinstance(sides, Miss) or head_size is None:
            return None
        q, k = sides
        qkv = q.signature[0]
        v_items = tuple(
            item
            for split in qkv.users
            if _split_signature(split) == q.signature
            for item in getitems(split).get(2, [])
        )
        splits = {q.split, k.split}
        splits.update(split for split in map(getitem_of, v_items) if split is not None)
        rope_items = tuple(anchor.users)
        inputs = [qkv, q.weight, k.weight, positions, cache, q.bias, k.bias]
        point = insertion_point([*rope_items, *v_items], inputs)
        if point is None:
            return None
        nodes = (*q.nodes, *k.nodes, *splits, anchor, *rope_items, *v_items)
        return QKNormRopeSite(
            nodes, qkv=qkv, q=q, k=k, positions=positions, cos_sin_cache=cache,
            head_size=head_size, rotary_dim=arg(anchor, 5, "rotary_dim"),
            is_neox=arg(anchor, 6, "is_neox"), dtype=node_dtype(qkv), rope=anchor,
            v_items=v_items, point=point,
        )

    def extra_check(self, site: QKNormRopeSite) -> bool:
        return supports(FUSED_OP, dtype=site.dtype, head_dim=site.head_size,
                        soc=self.context["soc"])

    def rewrite(self, graph: fx.Graph, site: QKNormRopeSite) -> None:
        op = ascend_op(FUSED_OP)
        rope = site.rope
        # The op's v is a fresh copy of qkv's v columns; v's consumers keep reading qkv's view
        # (the unfused graph's v), so no copy of v is made where the op is inlined (host CPU)
        # and the attention input is what it is without fusion.
        fresh_v = fresh_like(meta_item(site.q.split, 2))
        vals = [meta_item(rope, 0), meta_item(rope, 1), fresh_v]
        label = stream_label(site.nodes)
        outs = insert_fused(graph, site.point, op, site.arguments(op), vals, label)
        redirect_getitems(rope, outs)
        graph.erase_node(outs[2])
        erase_dead(site.nodes)

    # --- reference functions (eager) -------------------------------------------------------

    def _sizes(self) -> tuple[int, int, int]:
        hd = self.settings["head_dim"] or 64
        return hd, self.settings["q_size"] or 4 * hd, self.settings["kv_size"] or 2 * hd

    def example_inputs(self) -> tuple[Any, ...]:
        hd, qs, kvs = self._sizes()
        dtype = self.settings["dtype"]
        gen = torch.Generator().manual_seed(0)
        qkv = torch.randn(5, qs + 2 * kvs, generator=gen).to(dtype)
        qw, kw = (torch.rand(hd, generator=gen) + 0.5).to(dtype), torch.rand(hd).to(dtype) + 0.5
        positions = torch.tensor([0, 3, 7, 1, 15])
        cache = torch.randn(16, hd, generator=gen).to(dtype)
        inputs: tuple[torch.Tensor, ...] = (qkv, qw, kw, positions, cache)
        if self.settings["bias"]:
            inputs += (torch.randn(hd).to(dtype) * 0.1, torch.randn(hd).to(dtype) * 0.1)
        return inputs

    def search(self, *inputs: Any) -> Any:
        hd, qs, kvs = self._sizes()
        qkv, qw, kw, positions, cache, *biases = inputs
        q, k, v = qkv.split([qs, kvs, kvs], dim=-1)
        t = qkv.shape[0]
        qn = ascend.rms_norm(q.reshape(t, qs // hd, hd), qw, self.settings["eps"])
        kn = ascend.rms_norm(k.reshape(t, kvs // hd, hd), kw, self.settings["eps"])
        if biases:
            qn, kn = qn + biases[0], kn + biases[1]
        q_rot, k_rot = ascend.rotary_embedding(
            positions, qn.reshape(t, qs), kn.reshape(t, kvs), cache, hd, hd, True
        )
        return q_rot, k_rot, v

    def replacement(self, *inputs: Any) -> Any:
        hd, qs, kvs = self._sizes()
        qkv, qw, kw, positions, cache, *biases = inputs
        qb, kb = biases if biases else (None, None)
        return ascend.split_qkv_rmsnorm_rope(
            qkv, qw, kw, positions, cache, qs, kvs, hd, hd, True, self.settings["eps"], qb, kb
        )
