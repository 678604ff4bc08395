"""Tensor, pipeline and Ray-executor parallelism on the host-CPU platform, in real processes.

Each multi-rank engine runs in its own `LLMWorker` child (the engine core in that process, one
worker process per rank) with no `VLLM_CPU_OMP_THREADS_BIND`: the plugin plans the ranks'
pools. Every worker writes its rank report (binding, fusion counts) to a directory the test
chooses. Single-rank references: the session's compiled engines (`compiled_runs`) and one
eager engine of this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
from vllm_ascend_testing.worker_client import LLMWorker, WorkerError

# conftest's values (the compiled references were generated with them).
NUM_LAYERS = 2
PROMPTS = ("Hello, my name is", "The capital of France is", "The future of AI is",
           "Once upon a time")
COMPILED_MAX_TOKENS = 12
# Dense models; TP=2 of the MoE model, compiled and eager, is test_expert_parallel's.
ARCHES = ("llama", "qwen3")
# Sites each pass rewrites in one rank's graphs: every rank holds every layer (TP splits the
# heads, not the layers), so per rank it is the single-rank count of test_fusion_e2e.
EXPECTED_FUSION = {
    "llama": {"qknorm_rope": 0, "norm_quant": 0, "muls_add": 0},  # no QK norm
    "qwen3": {"qknorm_rope": NUM_LAYERS, "norm_quant": 0, "muls_add": 0},
}
EAGER_MAX_TOKENS = 8

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


@dataclass
class RankedRun:
    """Greedy outputs of one engine and the reports of its worker processes."""

    outputs: list[dict[str, Any]]
    reports: dict[tuple[int, int], dict[str, Any]]

    def tokens(self) -> list[list[int]]:
        return [o["token_ids"] for o in self.outputs]


class Engines:
    """Run an engine configuration once per module in its own worker process."""

    def __init__(self, start: Callable[..., LLMWorker], tiny: Any, root: Path,
                 log_dir: str) -> None:
        self.start, self.tiny, self.root, self.log_dir = start, tiny, root, log_dir
        self._runs: dict[str, RankedRun] = {}

    def run(self, name: str, arch: str, *, compile: bool, max_tokens: int,
            setup: Callable[[LLMWorker], None] | None = None,
            teardown: Callable[[LLMWorker], None] | None = None,
            env: dict[str, str] | None = None, **engine: Any) -> RankedRun:
        if name in self._runs:
            return self._runs[name]
        reports = self.root / name
        worker = self.start(name, device="cpu", shared_inductor=not compile,
                            **{REPORT_DIR_ENV: str(reports)}, **(env or {}))
        try:
            if setup is not None:
                setup(worker)
            kwargs = llm_kwargs(str(self.tiny.path(arch)), compile=compile, log_dir=self.log_dir)
            kwargs.update(engine)
            try:
                worker.request("load", name=name, kwargs=kwargs, timeout=1200)
                answer = worker.request("generate", name=name, prompts=list(PROMPTS),
                                        max_tokens=max_tokens, timeout=600)
                worker.request("unload", name=name, timeout=120)
            finally:
                if teardown is not None:
                    teardown(worker)
        finally:
            worker.close()
        run = RankedRun(answer["outputs"], read_rank_reports(reports) if reports.exists() else {})
        self._runs[name] = run
        return run


@pytest.fixture(scope="module")
def engines(start_worker, tiny_models, tmp_path_factory: pytest.TempPathFactory,
            ascend_log_dir: str) -> Iterator[Engines]:
    yield Engines(start_worker, tiny_models, tmp_path_factory.mktemp("ranks"), ascend_log_dir)


def tp2_compiled(engines: Engines, arch: str) -> RankedRun:
    # Inductor's graph cache is shared by the ranks of a host: a rank whose graph another rank
    # compiled first would load it without running the passes. Off, every rank compiles.
    return engines.run(f"{arch}-tp2", arch, compile=True, max_tokens=COMPILED_MAX_TOKENS,
                       env={"TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}, tensor_parallel_size=2)


def eager_reference(engines: Engines) -> RankedRun:
    return engines.run("qwen3-eager-tp1", "qwen3", compile=False, max_tokens=EAGER_MAX_TOKENS)


def allowed_halves() -> list[list[int]]:
    allowed = sorted(os.sched_getaffinity(0))
    half = len(allowed) // 2
    return [allowed[:half], allowed[half:]]  # two ranks on this one-NUMA-node machine


# --- tensor parallel --------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_tp2_generates_the_greedy_tokens_of_tp1(engines: Engines, compiled_runs,
                                                arch: str) -> None:
    single = [o["token_ids"] for o in compiled_runs.get(arch, fusion=True).outputs]
    run = tp2_compiled(engines, arch)
    assert all(len(tokens) == COMPILED_MAX_TOKENS for tokens in run.tokens())
    assert run.tokens() == single


@pytest.mark.parametrize("arch", ARCHES)
def test_tp2_runs_the_fusion_passes_in_every_rank(engines: Engines, arch: str) -> None:
    reports = tp2_compiled(engines, arch).reports
    assert sorted(reports) == [(0, 0), (0, 1)]
    for report in reports.values():
        assert report["stage"] == "warmed_up"
        assert report["tensor_parallel_size"] == 2
        for name, expected in EXPECTED_FUSION[arch].items():
            assert report["fusion"].get(name) == expected, (report["rank"], report["fusion"])
            # every candidate site of the rank's shard was rewritten
            sites = report["fusion_sites"]["passes"][name]
            assert sites == {"expected": expected, "matched": expected}, (report["rank"], name)
        assert report["fusion_sites"]["from_cache"] is False


def test_tp2_ranks_run_on_disjoint_pools(engines: Engines) -> None:
    reports = tp2_compiled(engines, "qwen3").reports
    pools = [reports[(0, rank)]["cpus_allowed"] for rank in (0, 1)]
    assert pools == allowed_halves()
    assert [reports[(0, rank)]["bound_cpus"] for rank in (0, 1)] == pools
    assert len({reports[(0, rank)]["pid"] for rank in (0, 1)}) == 2


# --- pipeline parallel ------------------------------------------------------------------------

def test_pp2_generates_the_greedy_tokens_of_pp1(engines: Engines, compiled_runs) -> None:
    single = [o["token_ids"] for o in compiled_runs.get("qwen3", fusion=True).outputs]
    run = engines.run("qwen3-pp2", "qwen3", compile=True, max_tokens=COMPILED_MAX_TOKENS,
                      pipeline_parallel_size=2)
    assert run.tokens() == single
    assert [run.reports[(0, r)]["cpus_allowed"] for r in (0, 1)] == allowed_halves()
    assert {r["pipeline_parallel_size"] for r in run.reports.values()} == {2}


def test_pp2_eager_generates_the_greedy_tokens_of_pp1(engines: Engines) -> None:
    single = eager_reference(engines)
    """vLLM's CPU worker runs no forward pass before serving an eager model; the plugin's
    worker does (1 and 2 tokens), so the second stage has its activation buffer at its first
    step, and nothing compiles after ready."""
    run = engines.run("qwen3-pp2-eager", "qwen3", compile=False, max_tokens=EAGER_MAX_TOKENS,
                      pipeline_parallel_size=2)
    assert run.tokens() == single.tokens()
    assert {r["after_ready"]["compiles"] for r in run.reports.values()} == {0}


# --- Ray executor -----------------------------------------------------------------------------

def test_ray_tp2_generates_the_greedy_tokens_of_tp1(engines: Engines,
                                                    tmp_path_factory: pytest.TempPathFactory
                                                    ) -> None:
    single = eager_reference(engines)
    home = tmp_path_factory.mktemp("ray_home")
    # Short path: Ray's socket paths live under it (a Unix socket path has ~107 bytes).
    ray_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"ray-{os.getpid()}"

    def start_ray(worker: LLMWorker) -> None:
        worker.request("start_ray", temp_dir=str(ray_dir), npus=2, timeout=300)

    def stop_ray(worker: LLMWorker) -> None:
        worker.request("stop_ray", timeout=120)

    run = engines.run(
        "qwen3-ray-tp2", "qwen3", compile=False, max_tokens=EAGER_MAX_TOKENS,
        setup=start_ray, teardown=stop_ray,
        # Ray keeps its token and files under HOME; workers must run this interpreter, not
        # a `uv run` environment Ray would build when it sees the driver started by uv.
        env={"HOME": str(home), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
             "RAY_USAGE_STATS_ENABLED": "0"},
        tensor_parallel_size=2, distributed_executor_backend="ray",
    )
    assert run.tokens() == single.tokens()
    assert sorted(run.reports) == [(0, 0), (0, 1)]
    # The eager ranks' dummy steps compiled vLLM's vocabulary mask before ready.
    assert {r["after_ready"]["compiles"] for r in run.reports.values()} == {0}
    assert [run.reports[(0, r)]["cpus_allowed"] for r in (0, 1)] == allowed_halves()


# --- enable_cpu_binding: false -----------------------------------------------------------------

def test_binding_disabled_leaves_vllms_own_omp_binding(start_worker, tiny_models,
                                                       ascend_log_dir: str) -> None:
    """vLLM's automatic binding wants one NUMA node per local rank: on this one-node machine
    TP=2 then stops at vLLM's own assertion, as it does without the plugin."""
    nodes = [n for n in os.listdir("/sys/devices/system/node") if n[4:].isdigit()]
    if len(nodes) > 1:
        pytest.fail(f"this check needs a host with one NUMA node; this one has {len(nodes)}")
    worker = start_worker("qwen3-tp2-unbound", device="cpu", shared_inductor=True)
    kwargs = llm_kwargs(str(tiny_models.path("qwen3")), compile=False, log_dir=ascend_log_dir)
    kwargs.update(tensor_parallel_size=2,
                  additional_config={**kwargs["additional_config"], "enable_cpu_binding": False})
    try:
        with pytest.raises(WorkerError) as failure:
            worker.request("load", name="unbound", kwargs=kwargs, timeout=600)
    finally:
        worker.close()
    log = worker.log_path.read_text(errors="replace")
    assert "Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers" in (
        str(failure.value) + log)
    assert "CPU binding disabled by additional_config.enable_cpu_binding" in log
