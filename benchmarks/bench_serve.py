"""`vllm-ascend serve` under load: requests/s, latency and time to first token percentiles.

One TP=1 server of a tiny Qwen3-style model (random weights, float32, eager) on the host-CPU
platform; a deterministic mix of /v1/completions and /v1/chat/completions requests, streamed
and not, three prompt lengths and three `max_tokens`, all greedy, a fixed number in flight
(`vllm_ascend_testing.serve_load`). A short warm-up load runs first and is not counted. Every
answer is checked (`load_problems`): the figures are only reported for a load answered
completely and consistently. No target: the figures describe this host; with a model this
small they mostly measure the HTTP server, the scheduler and detokenization.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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


def run(quick: bool = False) -> list[Table]:
    """Start the server, run the warm-up and the measured load; one table."""
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model
    from vllm_ascend.entrypoints.local_engine import engine_env
    from vllm_ascend_testing.serve_load import build_load, load_problems, run_load
    from vllm_ascend_testing.serve_process import VllmServer, tiny_serve_args

    load = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        model = make_tiny_model("qwen3", root / "model", layers=2)
        env = engine_env(device="cpu", cache_root=root / "cache")
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # serve runs its own engine process
        env.pop("VLLM_CPU_OMP_THREADS_BIND", None)  # the plugin binds the worker itself
        args = tiny_serve_args(SERVED_NAME, "--enforce-eager",
                               max_num_seqs=load.concurrency)
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
        "eager, TP=1 on the host-CPU platform; client and server on the same host.",
        "Latency: from sending a request to its last byte; time to first token: to the first "
        "streamed chunk with text (streamed requests only). Requests/s and tokens/s over the "
        "whole load.",
        f"Every answer checked: complete, usage consistent, identical greedy answers per "
        f"(API, prompt, max_tokens), streamed or not: {len(problems)} problems.",
    ]
    columns = ["requests", "count", "requests/s", "output tokens/s", "latency p50 ms",
               "latency p99 ms", "TTFT p50 ms", "TTFT p99 ms"]
    return [Table("vllm-ascend serve under load (host-CPU platform)", columns, rows, notes)]
