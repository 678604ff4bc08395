"""warm_start: the one line a warm start logs, from vLLM's own load counters and from the fused
graphs AscendCompiler reuses; nothing on a cold start. (Through real engine starts:
tests/integration/test_warm_start.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend)
import pytest
import torch
from ascend_graph import GraphFusionPassManager
from vllm.compilation.counter import compilation_counter
from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
from vllm.config.utils import Range
from vllm_ascend.compilation.compiler import AscendCompiler
from vllm_ascend.engine import engine_of
from vllm_ascend.engine.warm_start import (
    CacheLoads,
    LoadBaseline,
    log_warm_start,
    warm_start_of,
)

A = torch.ops.ascend
RANGE = Range(start=1, end=16)
KEY = "artifact_compile_range_1_16_subgraph_0"


@pytest.fixture
def lines(logged: Any) -> Iterator[list[str]]:
    """Messages of the warm-start logger."""
    with logged("vllm_ascend.engine.warm_start") as found:
        yield found


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """vLLM's load counters as they were (the engines' loads go with the process setup, which
    the suite resets around every test)."""
    saved = compilation_counter.clone()
    yield
    for name in ("num_compiled_artifacts_loaded", "num_aot_artifacts_loaded"):
        setattr(compilation_counter, name, getattr(saved, name))


def _config(compile_s: float = 0.0, local_dir: str = "") -> VllmConfig:
    cfg = VllmConfig(compilation_config=CompilationConfig())
    cfg.compilation_config.compilation_time = compile_s
    cfg.compilation_config.local_cache_dir = local_dir
    return cfg


def test_a_cold_start_logs_nothing(lines: list[str]) -> None:
    assert log_warm_start(_config(12.0, "/c/rank_0_0/backbone"), CacheLoads(),
                          LoadBaseline.now()) is None
    assert lines == []


def test_vllm_graph_loads_since_the_baseline_are_counted_with_its_cache_dir(
        lines: list[str]) -> None:
    compilation_counter.num_compiled_artifacts_loaded += 5  # an earlier engine's loads
    baseline = LoadBaseline.now()
    compilation_counter.num_aot_artifacts_loaded += 1
    compilation_counter.num_compiled_artifacts_loaded += 3
    found = log_warm_start(_config(1.234, "/c/rank_0_0/backbone"), CacheLoads(), baseline)
    assert found is not None and found.artifacts == 3
    assert lines == ["warm start: loaded 3 compiled artifacts from /c/rank_0_0/backbone in "
                     "1.23 s"]


def test_an_aot_artifact_carrying_no_counted_graph_counts_itself() -> None:
    baseline = LoadBaseline.now()
    compilation_counter.num_aot_artifacts_loaded += 1
    found = warm_start_of(_config(0.5, "/c/x"), CacheLoads(), baseline)
    assert found is not None and (found.artifacts, found.dirs) == (1, ("/c/x",))


def test_ascend_loads_are_per_engine() -> None:
    one, other = _config(2.0), _config(3.0)
    engine_of(one).cache_loads.add("/a")
    engine_of(one).cache_loads.add("/a")
    found = warm_start_of(one, engine_of(one).cache_loads, LoadBaseline.now())
    assert found is not None and (found.artifacts, found.dirs, found.seconds) == (2, ("/a",), 2.0)
    assert warm_start_of(other, engine_of(other).cache_loads, LoadBaseline.now()) is None


def block(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y, res = A.add_rms_norm(x, residual, w, 1e-6)
    return y, res * 2.5 + x


def _load(cache: Path, cfg: VllmConfig) -> None:
    gen = torch.Generator().manual_seed(0)
    example = [torch.randn(4, 32, generator=gen), torch.randn(4, 32, generator=gen),
               torch.rand(32, generator=gen) + 0.5]
    compiler = AscendCompiler(GraphFusionPassManager())
    compiler.initialize_cache(str(cache))
    with torch.no_grad(), set_current_vllm_config(cfg):  # as vLLM compiles an engine's model
        compiler.load((KEY, str(cache / KEY)), torch.fx.symbolic_trace(block), example, 0,
                      RANGE)


def test_ascend_compiler_counts_the_fused_graphs_it_reuses(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold, warm = _config(), _config(0.25)
    _load(cache, cold)  # a miss: compiles and writes the artifact
    assert warm_start_of(cold, engine_of(cold).cache_loads, LoadBaseline.now()) is None
    _load(cache, warm)  # a hit
    found = warm_start_of(warm, engine_of(warm).cache_loads, LoadBaseline.now())
    assert found is not None and (found.artifacts, found.dirs) == (1, (str(cache),))
