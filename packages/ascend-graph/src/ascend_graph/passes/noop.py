"""No-op elimination: a view/reshape to the shape its input already has, or a dtype
conversion to the dtype it already has, is dropped."""

from __future__ import annotations

import torch
from torch import fx

from ascend_graph.passes.base import GraphPass
from ascend_graph.passes.fx_nodes import RESHAPE_TARGETS, same_shape, tensor_meta

_METHODS = frozenset({"view", "reshape"})
_TARGETS = RESHAPE_TARGETS | {torch.ops.prims.convert_element_type.default}


class NoOpEliminationPass(GraphPass):
    """Removes `view`/`reshape` nodes whose output shape provably equals the input shape, and
    `convert_element_type` nodes to the input's own dtype.

    Needs `meta["val"]` on both nodes (any traced ATen graph has it); symbolic sizes count as
    equal only when the shape environment proves it.
    """

    name = "noop_elimination"

    def __call__(self, graph: fx.Graph) -> int:
        count = 0
        for node in list(graph.nodes):
            is_noop_candidate = (node.op == "call_function" and node.target in _TARGETS) or (
                node.op == "call_method" and node.target in _METHODS
            )
            if not is_noop_candidate or not node.args or not isinstance(node.args[0], fx.Node):
                continue
            src, out = tensor_meta(node.args[0]), tensor_meta(node)
            if src is None or out is None or src.dtype != out.dtype:
                continue
            if same_shape(src, out):
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)
                count += 1
        return count
