"""The KV-cache write of an attention layer folded into its attention call."""

from __future__ import annotations

from typing import Any

from torch import fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized

from ascend_graph.passes.base import GraphPass
from ascend_graph.passes.fx_nodes import is_call, same_stream, sole_user
from ascend_graph.passes.sites import Miss, SiteResult

# The attention op's arguments the fused op takes over; any other argument set (a fused output
# quantisation scale) leaves the site alone.
_CARRIED = ("query", "key", "value", "output", "layer_name")
_DEPENDENCY = "kv_cache_dummy_dep"
_MUST_BE_NONE = ("output_scale", "output_block_scale")


class KVCacheAttentionPass(GraphPass):
    """Rewrites `update_op(key, value, layer)` + `attention_op(q, key, value, output, layer,
    kv_cache_dummy_dep=update)` into one `fused_op(q, key, value, output, layer)`.

    vLLM's attention layer writes its KV cache and then attends in two custom ops, each a trip
    through the dispatcher into Python that looks the layer up in the forward context; the
    fused op writes and attends in one. The op handles are constructor arguments (this package
    never imports vLLM): on vLLM they are `torch.ops.vllm.unified_kv_cache_update.default` and
    `torch.ops.vllm.unified_attention_with_output.default`; `fused_op` must take
    `(query, key, value, output!, layer_name)` and return nothing, so the functionalized call's
    outputs keep their positions. A site is rewritten only when the update's sole user is the
    attention call as its ordering dependency, both see the same key, value and layer, and no
    fused output quantisation is asked for.
    """

    name = "kv_cache_attention"
    counts_candidates = True

    def __init__(self, update_op: Any, attention_op: Any, fused_op: Any) -> None:
        missing = [name for name, op in (("update_op", update_op),
                                         ("attention_op", attention_op),
                                         ("fused_op", fused_op)) if op is None]
        if missing:
            raise ValueError(
                f"kv_cache_attention needs the op handles update_op, attention_op and fused_op; "
                f"missing: {', '.join(missing)}"
            )
        self.update_op = update_op
        self.attention_op = attention_op
        self.fused_op = fused_op

    def settings(self) -> dict[str, Any]:
        base = super().settings()
        base["ops"] = [str(self.update_op), str(self.attention_op), str(self.fused_op)]
        return base

    def __call__(self, graph: fx.Graph) -> int:
        return self.sites(graph).matched

    def sites(self, graph: fx.Graph) -> SiteResult:
        """Every KV-cache update is a candidate: each attention layer writes its cache."""
        updates = list(graph.find_nodes(op="call_function", target=self.update_op))
        count = 0
        miss: Miss | None = None
        for update in updates:
            attention = sole_user(update)
            why = self._why_not(update, attention)
            if why is not None:
                miss = miss or why
                continue
            assert attention is not None  # _why_not checked it
            attention.args = (self.fused_op,)
            attention.kwargs = {name: attention.kwargs[name] for name in _CARRIED}
            val = attention.meta.get("val")
            if isinstance(val, tuple):
                attention.meta["val"] = self._fused_val(val)
            eager = attention.meta.get("eager_input_vals")
            if eager is not None:
                # Inductor re-traces the call from these example values: they must match the
                # new arguments.
                _, values = eager
                attention.meta["eager_input_vals"] = (
                    (self.fused_op,), {name: values[name] for name in _CARRIED})
            graph.erase_node(update)
            count += 1
        return SiteResult(len(updates), count, miss)

    def _fused_val(self, val: tuple[Any, ...]) -> tuple[Any, ...]:
        """The fused call's example value from the attention call's: `auto_functionalized`
        returns the op's outputs, then the new value of each mutated argument in schema order
        (the attention op's `output` and `output_block_scale`, the fused op's `output`)."""
        mutated = _mutated_args(self.attention_op)
        kept = _mutated_args(self.fused_op)
        head = len(val) - len(mutated)
        if head < 0 or any(name not in mutated for name in kept):
            return val  # not the layout described above: leave it as found
        return (*val[:head], *(val[head + mutated.index(name)] for name in kept))

    def _why_not(self, update: fx.Node, attention: fx.Node | None) -> Miss | None:
        """None when the site can be rewritten, else where and why it cannot."""
        if attention is None:
            return Miss.at(update, "the KV-cache update has no single user")
        if not is_call(attention, auto_functionalized) or attention.args != (self.attention_op,):
            return Miss.at(update, f"its sole user {attention.name} is not the functionalized "
                                   f"{self.attention_op}")
        kwargs = attention.kwargs
        if kwargs.get(_DEPENDENCY) is not update:
            return Miss.at(attention, f"the update is not its {_DEPENDENCY} argument")
        missing = [n for n in _CARRIED if n not in kwargs]
        if missing:
            return Miss.at(attention, f"the attention call lacks {', '.join(missing)}")
        fused_quant = [name for name in _MUST_BE_NONE if kwargs.get(name) is not None]
        if fused_quant:
            return Miss.at(attention, f"the attention call fuses an output quantisation "
                                      f"({', '.join(fused_quant)})")
        if len(update.args) != 3 or update.kwargs:
            return Miss.at(update, "the update does not take exactly (key, value, layer_name)")
        key, value, layer = update.args
        if not (kwargs["key"] is key and kwargs["value"] is value
                and kwargs["layer_name"] == layer):
            return Miss.at(attention, "the attention call sees another key, value or layer")
        if not same_stream([update, attention]):
            return Miss.at(attention, "the update and the attention run on different streams")
        return None


def _mutated_args(op: Any) -> list[str]:
    """Names of the arguments `op` writes to (`Tensor(a!)`), in schema order."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return []
    return [a.name for a in schema.arguments
            if a.alias_info is not None and a.alias_info.is_write]  # fmt: skip
