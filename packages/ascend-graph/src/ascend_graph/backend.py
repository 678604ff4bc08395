"""`make_backend`: the Ascend fusions for plain `torch.compile`, without vLLM.

backend = ascend_graph.make_backend({"muls_add_scale": 2.5})
with torch.no_grad():
    out = torch.compile(model, backend=backend)(x)
backend.report   # {"noop_elimination": 0, ..., "muls_add": 2}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import fx

from ascend_graph.manager import SWITCH_DEFAULTS, GraphFusionPassManager
from ascend_graph.pipeline import GraphHook, check_backend, compile_graph

#: Keys `make_backend` accepts besides the pass switches.
EXTRA_KEYS: dict[str, str] = {
    "muls_add_scale": "number or None (None: fuse `x * s + y` for any constant s)",
    "backend": "'eager' (default), 'inductor' or 'npugraph_ex'",
    "soc": "'A2', 'A3', 'A5', '310P' or 'cpu' (default)",
    "w4a4": "true when the model has W4A4 layers (turns norm_quant off)",
    "qknorm_shapes": "list of (head_dim, q_size, kv_size), or None for any",
    "norm_eps": "list of RMSNorm eps values to fuse (default [1e-6, 1e-5])",
    "attention_ops": "(update_op, attention_op, fused_op) handles for kv_cache_attention, or"
                     " None (default: that pass does not run)",
}


class AscendBackend:
    """A torch.compile backend running the Ascend passes; `.report` accumulates counts."""

    def __init__(
        self, config: Mapping[str, Any] | None = None, *, on_graph: GraphHook | None = None
    ) -> None:
        self.on_graph = on_graph
        config = dict(config or {})
        allowed = [*SWITCH_DEFAULTS, *EXTRA_KEYS]
        unknown = sorted(set(config) - set(allowed))
        if unknown:
            raise ValueError(
                f"unknown make_backend config key(s) {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(allowed)}"
            )
        self.backend_name = check_backend(config.pop("backend", "eager"))
        kwargs: dict[str, Any] = {}
        for key in ("muls_add_scale", "soc", "w4a4", "qknorm_shapes", "attention_ops"):
            if key in config:
                kwargs[key] = config.pop(key)
        if "norm_eps" in config:
            kwargs["norm_eps"] = config.pop("norm_eps")
        self.manager = GraphFusionPassManager.from_switches(config, **kwargs)
        self.compiled_graphs = 0

    @property
    def report(self) -> dict[str, int]:
        """Pass name -> sites rewritten in every graph compiled so far."""
        return dict(self.manager.counts)

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        self.compiled_graphs += 1
        return compile_graph(
            gm, example_inputs, manager=self.manager, backend=self.backend_name,
            on_graph=self.on_graph,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"AscendBackend(backend={self.backend_name!r}, manager={self.manager!r})"


def make_backend(
    config: Mapping[str, Any] | None = None, *, on_graph: GraphHook | None = None
) -> AscendBackend:
    """A torch.compile backend applying the Ascend fusion passes.

    `config` keys: `fuse_norm_quant`, `fuse_qknorm_rope`, `fuse_muls_add`,
    `fuse_kv_cache_attention` (default true, as in the Ascend compilation config),
    `muls_add_scale`, and the optional `backend`, `soc`, `w4a4`, `qknorm_shapes`, `norm_eps`,
    `attention_ops`. Unknown keys raise ValueError. `on_graph` receives
    every graph right after the passes (for dumps and tests).
    """
    return AscendBackend(config, on_graph=on_graph)
