"""Warm starts: one line per engine, ``warm start: loaded N compiled artifacts from DIR in X s``."""
# vLLM's compilation_counter counts its own cache loads (host CPU); AscendCompiler.load counts the
# fused graphs it reuses (NPU), which vLLM does not count. A cold start logs nothing.

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# vLLM's counters of what it loaded from its compile cache (vllm/compilation/counter.py).
VLLM_GRAPHS_LOADED = "num_compiled_artifacts_loaded"
VLLM_AOT_LOADED = "num_aot_artifacts_loaded"


@dataclass
class CacheLoads:
    """Fused graphs ``AscendCompiler.load`` reused for one engine, and their directories."""

    count: int = 0
    dirs: list[str] = field(default_factory=list)

    def add(self, directory: str) -> None:
        self.count += 1
        if directory not in self.dirs:
            self.dirs.append(directory)


def vllm_loaded(counter: str) -> int:
    """vLLM's count ``counter`` of loads from its compile cache in this process so far."""
    from vllm.compilation.counter import compilation_counter

    return int(getattr(compilation_counter, counter, 0))


@dataclass(frozen=True)
class LoadBaseline:
    """vLLM's load counters when a worker began (the counters are per process)."""

    graphs: int = 0
    aot: int = 0

    @classmethod
    def now(cls) -> LoadBaseline:
        return cls(vllm_loaded(VLLM_GRAPHS_LOADED), vllm_loaded(VLLM_AOT_LOADED))


@dataclass(frozen=True)
class WarmStart:
    """What a warm start loaded: artifacts, the directories they came from, the seconds."""

    artifacts: int
    dirs: tuple[str, ...]
    seconds: float

    def line(self) -> str:
        return (f"warm start: loaded {self.artifacts} compiled artifacts from "
                f"{', '.join(self.dirs) or '(unknown dir)'} in {self.seconds:.2f} s")


def warm_start_of(vllm_config: Any, ours: CacheLoads,
                  baseline: LoadBaseline) -> WarmStart | None:
    """The warm start of this engine since ``baseline``; None when nothing was loaded."""
    cc = vllm_config.compilation_config
    graphs = max(0, vllm_loaded(VLLM_GRAPHS_LOADED) - baseline.graphs)
    vllm_count = graphs or max(0, vllm_loaded(VLLM_AOT_LOADED) - baseline.aot)
    total = ours.count + vllm_count
    if total == 0:
        return None
    dirs = list(ours.dirs)
    local = str(getattr(cc, "local_cache_dir", "") or "")
    if vllm_count and local and local not in dirs:
        dirs.append(local)
    return WarmStart(total, tuple(dirs), float(getattr(cc, "compilation_time", 0.0) or 0.0))


def log_warm_start(vllm_config: Any, ours: CacheLoads,
                   baseline: LoadBaseline) -> WarmStart | None:
    """Log this engine's warm start (one info line; nothing on a cold start); returns it."""
    found = warm_start_of(vllm_config, ours, baseline)
    if found is not None:
        logger.info("%s", found.line())
    return found
