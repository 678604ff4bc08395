"""`GraphFusionPassManager`: which passes run, in which order, and what they rewrote.

Fixed order (each pass sees the result of the previous ones):

1. `noop_elimination` - always on; removes reshapes to the same shape, which would otherwise
   sit between the ops a pattern expects to be adjacent.
2. `allgather_chunk_cleanup` - with sequence parallelism; exposes the norm that follows.
3. `norm_quant` - `fuse_norm_quant`; off for models with W4A4 layers.
4. `qknorm_rope` - `fuse_qknorm_rope`.
5. `muls_add` - `fuse_muls_add`; after the norm passes, as their idioms never contain
   `x * s + y`.
6. `kv_cache_attention` - `fuse_kv_cache_attention`, when the attention op handles are given
   (`attention_ops`); it touches only the attention calls, which no other pass matches.

Every run counts the `ascend.*` op calls of the graph before the first pass (`ascend_ops`: what
the passes were given, e.g. whether a platform's graphs hold the Ascend ops at all), and, per
pass, the candidate sites (the anchor nodes that look like the pass's idiom) against the sites
rewritten (`sites`). When a pass leaves candidates alone, one
warning per pass (through `on_miss`, by default this module's logger, once per manager) names
the pass and the first node where matching stopped, so a fusion never stops silently.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import fx

from ascend_graph.capability import check_soc
from ascend_graph.passes.allgather import AllGatherChunkCleanupPass
from ascend_graph.passes.base import CompileRange, GraphPass
from ascend_graph.passes.fusion_passes import (
    DEFAULT_DTYPES,
    DEFAULT_EPS,
    MulsAddPass,
    NormQuantPass,
    QKNormRopePass,
)
from ascend_graph.passes.kv_attention import KVCacheAttentionPass
from ascend_graph.passes.noop import NoOpEliminationPass
from ascend_graph.passes.sites import SiteResult

logger = logging.getLogger(__name__)

#: Every pass name, in run order: the keys of every report.
PASS_NAMES: tuple[str, ...] = (
    "noop_elimination",
    "allgather_chunk_cleanup",
    "norm_quant",
    "qknorm_rope",
    "muls_add",
    "kv_cache_attention",
)
#: Pass name -> its switch in `ascend_compilation_config` (the other passes have none).
PASS_SWITCHES: dict[str, str] = {
    "norm_quant": "fuse_norm_quant",
    "qknorm_rope": "fuse_qknorm_rope",
    "muls_add": "fuse_muls_add",
    "kv_cache_attention": "fuse_kv_cache_attention",
}
#: Switch defaults; must equal `ascend_config.compilation_defaults()` (an integration test
#: checks this; this package does not import ascend_config).
SWITCH_DEFAULTS: dict[str, bool] = {
    "fuse_norm_quant": True,
    "fuse_qknorm_rope": True,
    "fuse_muls_add": True,
    "fuse_kv_cache_attention": True,
}
_UUID_SOURCES = ("manager.py", "capability.py", "passes")


class GraphFusionPassManager:
    """Runs the configured Ascend passes on a `torch.fx.Graph` in place.

    Callable with the inductor custom-pass interface (`manager(graph)`); `uuid()` changes
    whenever a pass, a pattern, a setting or this package's pass code changes.
    """

    def __init__(
        self,
        *,
        fuse_norm_quant: bool = True,
        fuse_qknorm_rope: bool = True,
        fuse_muls_add: bool = True,
        fuse_kv_cache_attention: bool = True,
        muls_add_scale: float | None = None,
        soc: str = "cpu",
        w4a4: bool = False,
        sequence_parallel: bool = False,
        allgather_op: Any = None,
        chunk_op: Any = None,
        norm_eps: Sequence[float] = DEFAULT_EPS,
        dtypes: Sequence[Any] = DEFAULT_DTYPES,
        qknorm_shapes: Sequence[tuple[int, int, int]] | None = None,
        attention_ops: tuple[Any, Any, Any] | None = None,
        on_miss: Callable[[str, str], None] | None = None,
    ) -> None:
        check_soc(soc)
        for name, value in (
            ("fuse_norm_quant", fuse_norm_quant),
            ("fuse_qknorm_rope", fuse_qknorm_rope),
            ("fuse_muls_add", fuse_muls_add),
            ("fuse_kv_cache_attention", fuse_kv_cache_attention),
            ("w4a4", w4a4),
            ("sequence_parallel", sequence_parallel),
        ):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}")
        self.soc = soc
        self.w4a4 = w4a4
        passes: list[GraphPass] = [NoOpEliminationPass()]
        if sequence_parallel:
            passes.append(AllGatherChunkCleanupPass(allgather_op, chunk_op))
        if fuse_norm_quant and not w4a4:
            passes.append(NormQuantPass(eps_values=norm_eps, dtypes=dtypes, soc=soc))
        if fuse_qknorm_rope:
            passes.append(
                QKNormRopePass(eps_values=norm_eps, dtypes=dtypes, soc=soc, shapes=qknorm_shapes)
            )
        if fuse_muls_add:
            passes.append(MulsAddPass(scale=muls_add_scale, dtypes=dtypes, soc=soc))
        if fuse_kv_cache_attention and attention_ops is not None:
            passes.append(KVCacheAttentionPass(*attention_ops))
        self.passes: tuple[GraphPass, ...] = tuple(passes)
        self.counts: dict[str, int] = dict.fromkeys(PASS_NAMES, 0)
        self.last_counts: dict[str, int] = dict.fromkeys(PASS_NAMES, 0)
        #: Per enabled pass, summed over every run: candidate sites ("expected", None for a
        #: pass without candidates) and sites rewritten ("matched").
        self.sites: dict[str, dict[str, int | None]] = {
            p.name: {"expected": 0 if p.counts_candidates else None, "matched": 0}
            for p in self.passes}
        self.last_sites: dict[str, SiteResult] = {}
        #: Graphs this manager ran on (0 after a start that loaded every graph from a cache).
        self.graphs_run = 0
        #: Calls per `ascend` op (e.g. "ascend.rms_norm", any overload) in the graphs the
        #: passes ran on, counted before the first pass, summed over every run.
        self.ascend_ops: dict[str, int] = {}
        self._on_miss = on_miss or self._warn_once
        self._warned: set[str] = set()
        self._source: bytes | None = None

    @classmethod
    def from_switches(cls, switches: Mapping[str, Any], **kwargs: Any) -> GraphFusionPassManager:
        """Build from `ascend_compilation_config`-style switches (missing keys: defaults).

        `muls_add_scale` is taken from the mapping too. Other keys (e.g. `enable_npugraph_ex`)
        are ignored, since the compilation config holds more than pass switches; `kwargs` go
        to the constructor and win over the mapping.
        """
        chosen: dict[str, Any] = dict(SWITCH_DEFAULTS)
        for key in (*SWITCH_DEFAULTS, "muls_add_scale"):
            if key in switches and key not in kwargs:
                chosen[key] = switches[key]
        return cls(**chosen, **kwargs)

    @property
    def enabled(self) -> tuple[str, ...]:
        """Names of the passes this manager runs, in order."""
        return tuple(p.name for p in self.passes)

    def is_applicable_for_range(self, compile_range: CompileRange) -> bool:
        """True when at least one pass applies to graphs compiled for `compile_range`."""
        return any(p.is_applicable_for_range(compile_range) for p in self.passes)

    def __call__(self, graph: fx.Graph, compile_range: CompileRange = None) -> None:
        self.run(graph, compile_range)

    def run(self, graph: fx.Graph, compile_range: CompileRange = None) -> dict[str, int]:
        """Run every applicable pass in order; return (and keep) this run's counts."""
        if isinstance(graph, fx.GraphModule):
            graph = graph.graph
        if not isinstance(graph, fx.Graph):
            raise TypeError(f"expected a torch.fx.Graph, got {type(graph).__name__}")
        for name in ascend_op_calls(graph):
            self.ascend_ops[name] = self.ascend_ops.get(name, 0) + 1
        last = dict.fromkeys(PASS_NAMES, 0)
        last_sites: dict[str, SiteResult] = {}
        for p in self.passes:
            if not p.is_applicable_for_range(compile_range):
                continue
            result = p.sites(graph)
            last_sites[p.name] = result
            last[p.name] = result.matched
            self.counts[p.name] += result.matched
            total = self.sites[p.name]
            total["matched"] = (total["matched"] or 0) + result.matched
            if result.expected is not None:
                total["expected"] = (total["expected"] or 0) + result.expected
            if result.short:
                self._on_miss(p.name, _miss_message(p.name, result, compile_range))
        self.graphs_run += 1
        self.last_counts = last
        self.last_sites = last_sites
        return dict(last)

    def _warn_once(self, name: str, message: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("%s", message)

    def settings(self) -> dict[str, Any]:
        return {
            "soc": self.soc,
            "w4a4": self.w4a4,
            "passes": [{"name": p.name, **p.settings()} for p in self.passes],
        }

    def uuid(self) -> str:
        """Stable hex id of passes, patterns, settings and the pass source code (recomputed on
        every call, so later registrations or setting changes are reflected)."""
        if self._source is None:
            self._source = _source_digest()
        digest = hashlib.sha256(self._source)
        digest.update(json.dumps(self.settings(), sort_keys=True, default=str).encode())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return f"GraphFusionPassManager(passes={list(self.enabled)}, soc={self.soc!r})"


def ascend_op_calls(graph: fx.Graph) -> list[str]:
    """The `ascend` op of every call in `graph`, as its packet name ("ascend.rms_norm")."""
    names = []
    for node in graph.nodes:
        if node.op == "call_function" and getattr(node.target, "namespace", None) == "ascend":
            names.append(str(node.target.overloadpacket))
    return names


def _miss_message(name: str, result: SiteResult, compile_range: CompileRange) -> str:
    where = "" if compile_range is None else f" (compile range {compile_range})"
    return (f"Ascend fusion pass {name} rewrote {result.matched} of {result.expected} candidate "
            f"sites in a graph{where}; matching stopped at {result.miss}")


def _source_digest() -> bytes:
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for name in _UUID_SOURCES:
        path = root / name
        files = sorted(path.glob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.digest()
