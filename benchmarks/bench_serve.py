"""`vllm-ascend serve` under load: requests/s, latency and time to first token percentiles.

One TP=1 server of a tiny Qwen3-style model (random weights, float32, compiled with the Ascend
passes) on the host-CPU platform; a deterministic mix of /v1/completions and
/v1/chat/completions requests, streamed and not, three prompt lengths and three `max_tokens`,
all greedy, a fixed number in flight (`vllm_ascend_testing.serve_load`). A short warm-up load
runs first and is not counted. Every answer is checked (`load_problems`): the figures are only
reported for a load answered completely and consistently. No target: the figures describe this
host; with a model this small they mostly measure the HTTP server, the scheduler and
detokenization.

No compile after ready: the worker's rank report (``VLLM_ASCEND_RANK_REPORT_DIR``) counts the
compiles, pass-manager runs and graph captures after the engine was ready
(``vllm_ascend.engine.ready_watch``); a second table gives them, the warm-up load
included, with the verdict (the target is 0).
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.table import Table

if TYPE_CHECKING:
    from vllm_ascend_testing.serve_load import LoadResult

SERVED_NAME = "tiny-qwen3"


@dataclass(frozen=True)
class ServeLoad:
    """The load of one benchmark run."""

    requests: int
    concurrency: int
    max_tokens: tuple[int, ...]
    warmup: int


FULL = ServeLoad(requests=600, concurrency=16, max_tokens=(16, 32, 64), warmup=32)
QUICK = ServeLoad(requests=48, concurrency=8, max_tokens=(4, 8), warmup=8)


def _row(label: str, results: list[LoadResult], wall_s: float | None) -> list[object]:
    """One table row; requests/s and tokens/s only with the wall time of the whole load."""
    from vllm_ascend_testing.serve_load import summarize

    figures = summarize(results, wall_s if wall_s is not None else 1.0)
    ms = {key: round(value * 1000, 1) for key, value in figures.items() if key.endswith("_s")}
    return [
        label,
        len(results),
        round(figures["requests_per_s"], 2) if wall_s is not None else "",
        round(figures["output_tokens_per_s"], 1) if wall_s is not None else "",
        ms["latency_p50_s"],
        ms["latency_p99_s"],
        ms.get("ttft_p50_s", ""),
        ms.get("ttft_p99_s", ""),
    ]


AFTER_READY_COLUMNS = ["rank", "compiles at start-up", "compile s in all",
                       "pass-manager runs at start-up", "compiles after ready",
                       "pass-manager runs after ready", "captures after ready", "verdict"]


def after_ready_table(reports: dict[tuple[int, int], dict[str, Any]]) -> Table:
    """The rank reports' compile figures: one row per rank, its post-ready counts and verdict
    ("pass" with none, else "FAIL"); the notes name every post-ready cause."""
    if not reports:
        raise RuntimeError("no rank report was written: the post-ready compile count is unknown")
    rows: list[list[object]] = []
    causes: list[str] = []
    total = 0
    for (dp_rank, rank), report in sorted(reports.items()):
        if "after_ready" not in report or not report.get("ready"):
            raise RuntimeError(f"rank report dp{dp_rank}-rank{rank} has no post-ready count "
                               f"(stage {report.get('stage')!r}, ready {report.get('ready')!r})")
        after = report["after_ready"]
        events = int(after["compiles"]) + int(after["pass_runs"]) + int(after["captures"])
        total += events
        start_compiles = report["compiles"]["count"] - after["compiles"]
        rows.append([f"dp{dp_rank} rank{rank}", start_compiles,
                     round(report["compiles"]["seconds"], 2),
                     report["pass_runs"] - after["pass_runs"], after["compiles"],
                     after["pass_runs"], after["captures"], "pass" if events == 0 else "FAIL"])
        causes.extend(f"dp{dp_rank} rank{rank}: {cause}" for cause in after["causes"])
    notes = [f"compiles, pass-manager runs and captures after ready: {total} (target 0): "
             f"{'pass' if total == 0 else 'FAIL'}; counted from the moment the worker was "
             "ready, so the warm-up load is included."]
    notes += [f"after ready: {cause}" for cause in causes]
    return Table("vllm-ascend serve: compiles after ready (host-CPU platform)",
                 AFTER_READY_COLUMNS, rows, notes)


def run(quick: bool = False) -> list[Table]:
    """Start the server, run the warm-up and the measured load; one table."""
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model
    from vllm_ascend.entrypoints.local_engine import engine_env
    from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
    from vllm_ascend_testing.serve_load import build_load, load_problems, run_load
    from vllm_ascend_testing.serve_process import VllmServer, tiny_serve_args

    load = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        model = make_tiny_model("qwen3", root / "model", layers=2)
        env = engine_env(device="cpu", cache_root=root / "cache")
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # serve runs its own engine process
        env.pop("VLLM_CPU_OMP_THREADS_BIND", None)  # the plugin binds the worker itself
        env[REPORT_DIR_ENV] = str(root / "ranks")
        args = tiny_serve_args(SERVED_NAME, max_num_seqs=load.concurrency)
        with VllmServer(model, args, env, root / "serve.log") as server:
            startup_s = server.wait_healthy(timeout=600)
            warmup = build_load(load.warmup, max_tokens=load.max_tokens, seed=1)
            asyncio.run(run_load(server.base_url, SERVED_NAME, warmup, load.concurrency))
            requests = build_load(load.requests, max_tokens=load.max_tokens)
            results, wall_s = asyncio.run(
                run_load(server.base_url, SERVED_NAME, requests, load.concurrency))
            problems = load_problems(results)
            if problems:
                raise RuntimeError(f"{len(problems)} bad answers under load, e.g.:\n"
                                   + "\n".join(problems[:5]) + "\n" + server.log_tail())
            compiles = after_ready_table(read_rank_reports(root / "ranks"))
    rows = [_row("all", results, wall_s)]
    for api in ("completion", "chat"):
        for stream in (False, True):
            subset = [r for r in results if r.request.api == api and r.request.stream == stream]
            rows.append(_row(f"{api}, {'streamed' if stream else 'not streamed'}", subset, None))
    notes = [
        f"{load.requests} greedy requests, {load.concurrency} in flight, max_tokens "
        f"{'/'.join(map(str, load.max_tokens))}, prompts of about 5/40/200 tokens; "
        f"{wall_s:.1f} s wall; after a {load.warmup}-request warm-up; server ready in "
        f"{startup_s:.0f} s.",
        "Qwen3-style tiny model from make_tiny_model (2 layers, random weights), float32, "
        "compiled (vLLM's compile with the Ascend passes), TP=1 on the host-CPU platform; "
        "client and server on the same host.",
        "Latency: from sending a request to its last byte; time to first token: to the first "
        "streamed chunk with text (streamed requests only). Requests/s and tokens/s over the "
        "whole load.",
        f"Every answer checked: complete, usage consistent, identical greedy answers per "
        f"(API, prompt, max_tokens), streamed or not: {len(problems)} problems.",
    ]
    columns = ["requests", "count", "requests/s", "output tokens/s", "latency p50 ms",
               "latency p99 ms", "TTFT p50 ms", "TTFT p99 ms"]
    return [Table("vllm-ascend serve under load (host-CPU platform)", columns, rows, notes),
            compiles]
