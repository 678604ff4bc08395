"""The KV-cache write of an attention layer folded into its attention call."""

from __future__ import annotations

from typing import Any

from torch import fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized

from ascend_graph.passes.base import GraphPass
from ascend_graph.passes.fx_nodes import is_call, same_stream, sole_user

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
        count = 0
        for update in list(graph.find_nodes(op="call_function", target=self.update_op)):
            attention = sole_user(update)
            if attention is None or not self._fusable(update, attention):
                continue
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
        return count

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

    def _fusable(self, update: fx.Node, attention: fx.Node) -> bool:
        if not is_call(attention, auto_functionalized) or attention.args != (self.attention_op,):
            return False
        kwargs = attention.kwargs
        if kwargs.get(_DEPENDENCY) is not update or any(n not in kwargs for n in _CARRIED):
            return False
        if any(kwargs.get(name) is not None for name in _MUST_BE_NONE):
            return False
        if len(update.args) != 3 or update.kwargs:
            return False
        key, value, layer = update.args
        same_site = (kwargs["key"] is key and kwargs["value"] is value
                     and kwargs["layer_name"] == layer)
        return same_site and same_stream([update, attention])


def _mutated_args(op: Any) -> list[str]:
    """Names of the arguments `op` writes to (`Tensor(a!)`), in schema order."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return []
    return [a.name for a in schema.arguments
            if a.alias_info is not None and a.alias_info.is_write]  # fmt: skip
