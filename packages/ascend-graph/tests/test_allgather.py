"""allgather_chunk_cleanup: an all-gather followed by its chunk is the identity; what it leaves
alone.
"""

from __future__ import annotations

import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.allgather import AllGatherChunkCleanupPass
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx


def test_allgather_then_chunk_is_identity(compile_module, close, sp_ops) -> None:
    gather, chunk = sp_ops.all_gather.default, sp_ops.chunk.default

    class _SP(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            same = chunk(gather(x, 2), 2)  # identity
            other = chunk(gather(x, 2), 4)  # a quarter of the gather: not this rank's slice
            return same * 2, other

    cfg = {"fuse_norm_quant": False}
    off = compile_module(_SP(), (torch.randn(8, 4),), config=cfg)
    assert off.report["allgather_chunk_cleanup"] == 0  # no sequence parallelism: not run

    torch._dynamo.reset()
    graphs = []
    manager = GraphFusionPassManager(sequence_parallel=True, allgather_op=gather, chunk_op=chunk)
    from ascend_graph.pipeline import compile_graph

    def backend(gm, inputs):
        return compile_graph(gm, inputs, manager=manager, on_graph=graphs.append)

    x = torch.randn(8, 4)
    with torch.no_grad():
        out = torch.compile(_SP(), backend=backend, fullgraph=True)(x)
    assert manager.counts["allgather_chunk_cleanup"] == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count(str(chunk)) == 1
    assert targets.count(str(gather)) == 1
    close(out, _SP()(x), torch.float32)


def test_allgather_cleanup_needs_both_ops() -> None:
    with pytest.raises(ValueError, match="allgather_op and chunk_op"):
        GraphFusionPassManager(sequence_parallel=True, allgather_op=None, chunk_op=None)


def test_allgather_cleanup_goes_on_after_sites_it_leaves(sp_ops) -> None:
    """Every kind of site the pass leaves alone, then two it rewrites: both are counted."""
    gather, chunk = sp_ops.all_gather, sp_ops.chunk

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        padded = chunk(torch.nn.functional.pad(x, (0, 0, 4, 0)), 2)  # no gather
        streamed = chunk(gather(y, 2), 2)  # the gather runs on another stream
        quarter = chunk(gather(x, 2), 4)  # not this rank's whole slice
        return padded, streamed, quarter, chunk(gather(x, 2), 2), chunk(gather(y, 2), 2)

    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    first_gather = next(n for n in gm.graph.nodes if n.target == gather.default)
    first_gather.meta["stream_label"] = "aux"
    manager = GraphFusionPassManager(
        sequence_parallel=True, allgather_op=gather.default, chunk_op=chunk.default
    )
    assert manager.run(gm.graph)["allgather_chunk_cleanup"] == 2
    gm.recompile()
    got, want = gm(*inputs), fn(*inputs)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert got[3] is inputs[0] and got[4] is inputs[1]


@pytest.mark.parametrize(("gather", "chunk"), [(None, "chunk"), ("gather", None), (None, None)])
def test_allgather_cleanup_names_both_handles_when_one_is_missing(gather, chunk) -> None:
    with pytest.raises(ValueError) as info:
        AllGatherChunkCleanupPass(gather, chunk)
    assert str(info.value) == (
        "allgather_chunk_cleanup needs both op handles: allgather_op and chunk_op "
        f"(got allgather_op={gather!r}, chunk_op={chunk!r})"
    )


def test_allgather_cleanup_settings_name_its_ops_and_a_keyword_chunk_is_left_alone() -> None:
    def gather(x, n):  # type: ignore[no-untyped-def]
        return x

    def chunk(x=None, n=None):  # type: ignore[no-untyped-def]
        return x

    cleanup = AllGatherChunkCleanupPass(gather, chunk)
    assert cleanup.settings() == {"min_tokens": None, "max_tokens": None,
                                  "ops": [str(gather), str(chunk)]}
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    gathered = graph.call_function(gather, (x, 2))
    kept = graph.call_function(chunk, (), {"x": gathered, "n": 2})  # no positional input
    graph.output(kept)
    assert cleanup(graph) == 0
    assert [n.op for n in graph.nodes] == ["placeholder", "call_function", "call_function",
                                           "output"]
