"""The engines the end-to-end benchmark compares, each in its own worker process.

``stock`` is vLLM for CPU with no plugin loaded (``VLLM_PLUGINS`` names no installed plugin);
``fusion on`` / ``fusion off`` are the Ascend host-CPU platform with the Ascend fusion passes
switched on or off. Every engine gets a fresh compile cache (``VLLM_CACHE_ROOT``), so each
start-up compiles from scratch. An engine runs in-process in its worker (the profiler sees its
steps), or with ``engine_process=True`` as a user's ``vllm.LLM`` runs it: the engine core in a
process of its own, where each platform picks its executor (stock vLLM CPU: a worker process
beside the engine core; the host-CPU platform with one rank: the worker in the engine core,
``config_pipeline.parallel_layout``). CPU time and peak RSS cover the worker and its descendants.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV

# Engine label -> (VLLM_ASCEND_DEVICE, VLLM_PLUGINS or None for every plugin, fusion switch).
ENGINES: dict[str, tuple[str, str | None, bool]] = {
    "stock": ("auto", "none", False),
    "fusion on": ("cpu", None, True),
    "fusion off": ("cpu", None, False),
}


@dataclass
class EngineRun:
    """What one engine measured over the benchmark's rounds."""

    label: str
    startup_s: float = 0.0
    # Engine ready again in a new process on the compile cache the first start filled (0.0:
    # not measured).
    warm_startup_s: float = 0.0
    batch_rates: list[float] = field(default_factory=list)
    single_rates: list[float] = field(default_factory=list)
    # Tokens per second of the engine process's CPU time (user + system): less sensitive than
    # wall time to other processes taking the cores, more to busy-waiting threads.
    batch_cpu_rates: list[float] = field(default_factory=list)
    single_cpu_rates: list[float] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    tokens: list[list[int]] = field(default_factory=list)
    first_answer: str = ""  # the text generated for the first prompt, last time it ran
    report: dict[str, int] = field(default_factory=dict)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    import psutil

    return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time so far of a live process and its live descendants, in s."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):  # a descendant that has just exited
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """Peak resident set size (``VmHWM``) of a live process plus its live descendants' peaks,
    in MiB."""
    total = 0.0
    for member in process_tree(pid):
        for line in Path(f"/proc/{member}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
                break
        else:
            raise RuntimeError(f"/proc/{member}/status has no VmHWM line")
    return total


def engine_setup(
    label: str, model: Path, root: Path, max_num_seqs: int, *, dtype: str = "bfloat16",
    max_model_len: int = 512, compile: bool = True, engine_process: bool = False,
) -> tuple[dict[str, str], dict[str, Any]]:
    """(environment, `vllm.LLM` keyword arguments) of engine ``label``; files go under ``root``
    (the compile cache in ``root/cache-LABEL``, so an engine started again on the same ``root``
    starts warm; with ``engine_process``, the rank reports in ``root/ranks-LABEL``)."""
    from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs

    device, plugins, fusion = ENGINES[label]
    slug = label.replace(" ", "-")
    root.mkdir(parents=True, exist_ok=True)
    env = engine_env(device=device, cache_root=root / f"cache-{slug}", plugins=plugins)
    if plugins is None:
        env.pop("VLLM_PLUGINS", None)  # every installed plugin, whatever the shell says
    if engine_process:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
        env[REPORT_DIR_ENV] = str(root / f"ranks-{slug}")
    kwargs = llm_kwargs(
        str(model), fusion=fusion, dtype=dtype, max_num_seqs=max_num_seqs,
        max_model_len=max_model_len, compile=compile,
        kv_cache_mib=256, log_dir=str(root / "ascend-logs"),
    )
    return env, kwargs


class Engine:
    """One benchmark engine: a worker process holding one `vllm.LLM`."""

    def __init__(self, label: str, model: Path, root: Path, max_num_seqs: int,
                 log_name: str = "", *, engine_process: bool = False) -> None:
        from vllm_ascend_testing.worker_client import LLMWorker

        env, self.kwargs = engine_setup(label, model, root, max_num_seqs,
                                        engine_process=engine_process)
        self.report_dir = env.get(REPORT_DIR_ENV) if engine_process else None
        self.run = EngineRun(label)
        slug = label.replace(" ", "-")
        self.worker = LLMWorker(env, root / f"{slug}{log_name}.log")

    def load(self) -> float:
        """Build the engine; returns its engine-ready time in seconds."""
        answer = self.worker.request("load", name="e2e", kwargs=self.kwargs, timeout=1800)
        return float(answer["startup_s"])

    def start(self) -> None:
        """Build the engine (timed: engine ready) and run one short warm-up generation."""
        self.run.startup_s = self.load()
        if self.run.label != "stock":
            self.run.report = self.fusion_report()
        self.generate(["warm-up"], 4)

    def fusion_report(self) -> dict[str, int]:
        """Sites rewritten per Ascend pass: from the engine's worker (its rank report) when
        the engine core has its own process, else from the in-process engine."""
        if self.report_dir is None:
            return dict(self.worker.request("fusion_report")["report"])
        from vllm_ascend.worker_duties.rank_report import read_rank_reports

        reports = read_rank_reports(self.report_dir)
        if not reports:
            raise RuntimeError(f"no rank report in {self.report_dir}")
        return dict(reports[min(reports)]["fusion"])

    def generate(self, prompts: list[str], max_tokens: int
                 ) -> tuple[float, float, list[list[int]]]:
        """Greedy generation; returns tokens per second of wall time and of the process's CPU
        time, and the token ids per prompt."""
        cpu = cpu_seconds(self.worker.proc.pid)
        answer = self.worker.request(
            "generate", name="e2e", prompts=prompts, max_tokens=max_tokens, timeout=1800
        )
        cpu = cpu_seconds(self.worker.proc.pid) - cpu
        tokens = [o["token_ids"] for o in answer["outputs"]]
        self.run.first_answer = str(answer["outputs"][0]["text"])
        count = sum(len(t) for t in tokens)
        return count / float(answer["elapsed_s"]), count / max(cpu, 1e-9), tokens

    def close(self) -> None:
        """Record the worker's peak RSS, then stop it."""
        with contextlib.suppress(OSError, RuntimeError):  # the worker already exited
            self.run.peak_rss_mib = peak_rss_mib(self.worker.proc.pid)
        self.worker.close()
