"""All-gather followed by the sequence-parallel chunk of the same rank is the identity."""

from __future__ import annotations

from typing import Any

from torch import fx

from ascend_graph.passes.base import GraphPass
from ascend_graph.passes.fx_nodes import (
    erase_dead,
    is_call,
    same_shape,
    same_stream,
    tensor_meta,
)
from ascend_graph.passes.sites import Miss, SiteResult


class AllGatherChunkCleanupPass(GraphPass):
    """Rewrites `chunk_op(allgather_op(x, ...), ...)` to `x`.

    The op handles are constructor arguments (this package never imports vLLM): on vLLM they
    are `torch.ops.vllm.all_gather.default` and `torch.ops.vllm.sequence_parallel_chunk_impl
    .default`. Both take the tensor as their first argument. When the graph records shapes, the
    chunk's output must have the shape of `x` (otherwise it is not this rank's slice of the
    gather and the site is left alone). The gather is erased once nothing else uses it.
    """

    name = "allgather_chunk_cleanup"
    counts_candidates = True

    def __init__(self, allgather_op: Any, chunk_op: Any) -> None:
        if allgather_op is None or chunk_op is None:
            raise ValueError(
                "allgather_chunk_cleanup needs both op handles: allgather_op and chunk_op "
                f"(got allgather_op={allgather_op!r}, chunk_op={chunk_op!r})"
            )
        self.allgather_op = allgather_op
        self.chunk_op = chunk_op

    def settings(self) -> dict[str, Any]:
        base = super().settings()
        base["ops"] = [str(self.allgather_op), str(self.chunk_op)]
        return base

    def __call__(self, graph: fx.Graph) -> int:
        return self.sites(graph).matched

    def sites(self, graph: fx.Graph) -> SiteResult:
        """Candidates: every chunk of an all-gather output."""
        expected = count = 0
        miss: Miss | None = None
        for chunk in list(graph.find_nodes(op="call_function", target=self.chunk_op)):
            gathered = chunk.args[0] if chunk.args else None
            if not is_call(gathered, self.allgather_op) or not gathered.args:
                continue
            expected += 1
            why = self._why_not(chunk, gathered)
            if why is not None:
                miss = miss or why
                continue
            chunk.replace_all_uses_with(gathered.args[0])
            erase_dead([chunk, gathered])
            count += 1
        return SiteResult(expected, count, miss)

    @staticmethod
    def _why_not(chunk: fx.Node, gathered: fx.Node) -> Miss | None:
        source = gathered.args[0]
        if not isinstance(source, fx.Node):
            return Miss.at(gathered, "the gathered value is not a graph node")
        if not same_stream([gathered, chunk]):
            return Miss.at(chunk, "the gather and the chunk run on different streams")
        src_val, out_val = tensor_meta(source), tensor_meta(chunk)
        if (
            src_val is not None
            and out_val is not None
            and (not same_shape(src_val, out_val) or src_val.dtype != out_val.dtype)
        ):
            return Miss.at(chunk, "the chunk is not this rank's slice (shape or dtype differs "
                                  "from the gathered input)")
        return None
