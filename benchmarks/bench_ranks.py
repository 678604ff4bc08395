"""Multi-rank on the host-CPU platform: tokens/s of TP=2 against TP=1 on the same model.

A Qwen3-style tiny model generates greedily for a batch of 8 prompts. TP=1 runs its worker in
the engine process with every allowed CPU; TP=2 runs two worker processes, each bound by the
plugin to its own half of the CPUs (no VLLM_CPU_OMP_THREADS_BIND set by hand). Both engines
stay up and are timed alternately, so the ratio is measured side by side in one run. Eager
mode: the comparison is about ranks, not compilation. No target: on a host this small the
ratio shows the cost of splitting (the all-reduces) more than any gain.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.bench_e2e import PROMPTS, QUICK, Size
from benchmarks.table import Table

# Smaller than the e2e benchmark's model: two engines of two processes each share the host.
FULL = Size(layers=4, hidden=512, heads=8, kv_heads=4, max_tokens=64, rounds=5)

SETTINGS = {"TP=1": 1, "TP=2": 2}


def run(quick: bool = False) -> list[Table]:
    """Measure TP=2 vs TP=1; one table with tokens/s, start-up, bound pools and the ratio."""
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model
    from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs
    from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
    from vllm_ascend_testing.worker_client import LLMWorker

    size = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        root = Path(tmp)
        model = make_tiny_model("qwen3", root / "model", layers=size.layers, hidden=size.hidden,
                                heads=size.heads, kv_heads=size.kv_heads, head_dim=64)
        workers: dict[str, LLMWorker] = {}
        startup: dict[str, float] = {}
        try:
            for label, tp in SETTINGS.items():
                env = engine_env(device="cpu", cache_root=root / f"cache-{tp}")
                env.pop("VLLM_CPU_OMP_THREADS_BIND", None)
                env[REPORT_DIR_ENV] = str(root / f"reports-{tp}")
                worker = LLMWorker(env, root / f"tp{tp}.log")
                workers[label] = worker
                kwargs = llm_kwargs(str(model), compile=False, max_num_seqs=len(PROMPTS),
                                    kv_cache_mib=256)
                kwargs["tensor_parallel_size"] = tp
                startup[label] = worker.request("load", name="tp", kwargs=kwargs,
                                                timeout=900)["startup_s"]
                worker.request("generate", name="tp", prompts=PROMPTS, max_tokens=4)  # warm-up
            rates: dict[str, list[float]] = {label: [] for label in SETTINGS}
            tokens: dict[str, list[list[int]]] = {}
            for _ in range(size.rounds):
                for label, worker in workers.items():  # alternate: drift hits both alike
                    answer = worker.request("generate", name="tp", prompts=PROMPTS,
                                            max_tokens=size.max_tokens, timeout=900)
                    count = sum(len(o["token_ids"]) for o in answer["outputs"])
                    rates[label].append(count / answer["elapsed_s"])
                    tokens[label] = [o["token_ids"] for o in answer["outputs"]]
            pools = {
                label: " / ".join(
                    ",".join(str(c) for c in report["bound_cpus"]) or "-"
                    for _, report in sorted(read_rank_reports(root / f"reports-{tp}").items())
                ) or "engine process (unbound)"
                for label, tp in SETTINGS.items()
            }
        finally:
            for worker in workers.values():
                worker.close()
    median = {label: statistics.median(values) for label, values in rates.items()}
    round_ratios = [two / one for two, one in zip(rates["TP=2"], rates["TP=1"], strict=True)]
    ratio = statistics.median(round_ratios)
    rows = [
        [label, round(median[label], 1), round(min(rates[label]), 1),
         round(max(rates[label]), 1), round(startup[label], 1), pools[label]]
        for label in SETTINGS
    ]
    rows.append(["ratio TP=2 / TP=1 (median of rounds)", round(ratio, 3), "", "", "", ""])
    notes = [
        f"Qwen3-style tiny model: {size.layers} layers, hidden {size.hidden}, {size.heads} "
        f"heads / {size.kv_heads} KV heads, head_dim 64, float32, eager; batch of "
        f"{len(PROMPTS)}, {size.max_tokens} greedy tokens each; {size.rounds} rounds, each "
        "timing both engines back to back.",
        "TP=1: one in-process worker on every allowed CPU. TP=2: two worker processes, each "
        "bound to its rank's pool by the plugin's rank plan (host-CPU platform).",
        f"Measured TP=2 at {ratio:.3f}x the tokens/s of TP=1 (round ratios "
        f"{min(round_ratios):.2f}-{max(round_ratios):.2f}).",
        "Greedy tokens identical TP=2 vs TP=1: "
        f"{'yes' if tokens['TP=2'] == tokens['TP=1'] else 'NO'}.",
    ]
    columns = ["setting", "tokens/s (median)", "min", "max", "start-up s", "bound CPUs per rank"]
    return [Table("Multi-rank: TP=2 vs TP=1 (host-CPU platform)", columns, rows, notes)]
