"""Ascend graph compilation: fusion passes over `torch.ops.ascend.*`, their manager, the
compile pipeline, and device-graph capture/replay wrappers.

Imports are lazy (PEP 562): `import ascend_graph` costs nothing until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ascend_graph.version import __version__ as __version__

_EXPORTS: dict[str, str] = {
    "GraphFusionPassManager": "ascend_graph.manager",
    "PASS_NAMES": "ascend_graph.manager",
    "PASS_SWITCHES": "ascend_graph.manager",
    "SWITCH_DEFAULTS": "ascend_graph.manager",
    "make_backend": "ascend_graph.backend",
    "AscendBackend": "ascend_graph.backend",
    "compile_graph": "ascend_graph.pipeline",
    "compute_hash": "ascend_graph.pipeline",
    "inductor_pass": "ascend_graph.pipeline",
    "BACKENDS": "ascend_graph.pipeline",
    "NpuGraphOptions": "ascend_graph.npu_graph_ex",
    "NpuGraphUnavailableError": "ascend_graph.npu_graph_ex",
    "RuntimeMode": "ascend_graph.graphs.runtime",
    "GraphRuntime": "ascend_graph.graphs.runtime",
    "NPUGraphRuntime": "ascend_graph.graphs.runtime",
    "RecordingRuntime": "ascend_graph.graphs.runtime",
    "GraphCaptureError": "ascend_graph.graphs.errors",
    "translate_capture_error": "ascend_graph.graphs.errors",
    "GraphWrapper": "ascend_graph.graphs.wrapper",
    "BreakableGraphWrapper": "ascend_graph.graphs.breakable",
    "Segment": "ascend_graph.graphs.breakable",
    "GraphParams": "ascend_graph.graphs.params",
    "GraphParamsStore": "ascend_graph.graphs.params",
    "decode_batch_sizes": "ascend_graph.graphs.params",
    "FusedGraph": "ascend_graph.fused_graph",
    "FusedGraphError": "ascend_graph.fused_graph",
    "compile_graph_fused": "ascend_graph.fused_graph",
    "dumps_fused_graph": "ascend_graph.fused_graph",
    "loads_fused_graph": "ascend_graph.fused_graph",
}

__all__ = [
    "BACKENDS",
    "PASS_NAMES",
    "PASS_SWITCHES",
    "SWITCH_DEFAULTS",
    "AscendBackend",
    "BreakableGraphWrapper",
    "FusedGraph",
    "FusedGraphError",
    "GraphCaptureError",
    "GraphFusionPassManager",
    "GraphParams",
    "GraphParamsStore",
    "GraphRuntime",
    "GraphWrapper",
    "NPUGraphRuntime",
    "NpuGraphOptions",
    "NpuGraphUnavailableError",
    "RecordingRuntime",
    "RuntimeMode",
    "Segment",
    "compile_graph",
    "compile_graph_fused",
    "compute_hash",
    "decode_batch_sizes",
    "dumps_fused_graph",
    "inductor_pass",
    "loads_fused_graph",
    "make_backend",
    "translate_capture_error",
]

if TYPE_CHECKING:
    from ascend_graph.backend import AscendBackend, make_backend
    from ascend_graph.fused_graph import (
        FusedGraph,
        FusedGraphError,
        compile_graph_fused,
        dumps_fused_graph,
        loads_fused_graph,
    )
    from ascend_graph.graphs.breakable import BreakableGraphWrapper, Segment
    from ascend_graph.graphs.errors import GraphCaptureError, translate_capture_error
    from ascend_graph.graphs.params import GraphParams, GraphParamsStore, decode_batch_sizes
    from ascend_graph.graphs.runtime import (
        GraphRuntime,
        NPUGraphRuntime,
        RecordingRuntime,
        RuntimeMode,
    )
    from ascend_graph.graphs.wrapper import GraphWrapper
    from ascend_graph.manager import (
        PASS_NAMES,
        PASS_SWITCHES,
        SWITCH_DEFAULTS,
        GraphFusionPassManager,
    )
    from ascend_graph.npu_graph_ex import NpuGraphOptions, NpuGraphUnavailableError
    from ascend_graph.pipeline import BACKENDS, compile_graph, compute_hash, inductor_pass


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ascend_graph' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
