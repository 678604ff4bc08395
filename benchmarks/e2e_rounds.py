"""The rounds of the end-to-end benchmarks: engines started alone, then timed in alternation,
and the ratios over rounds (used by ``bench_e2e`` and ``e2e_real``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from benchmarks.e2e_engines import ENGINES, Engine, EngineRun

T = TypeVar("T")

WARM_UP_TOKENS = 4  # per prompt, in each engine's untimed warm-up at the benchmark's prompts


def round_order(items: list[T], r: int) -> list[T]:
    """The order of round ``r``: the rotations of ``items``, then the rotations reversed.

    Rotations alone give every engine every position, but not every predecessor: with three
    engines, A always follows C and never B. Adding the reversed rotations makes each engine
    run directly after each other engine equally often (a Williams design), so whatever one
    engine leaves behind on the host (caches, clocks, memory) weighs on all others alike.
    """
    n = len(items)
    shift = r % n
    rotated = items[shift:] + items[:shift]
    return rotated if (r // n) % 2 == 0 else rotated[::-1]


def measure_engines(
    model: Path, root: Path, prompts: list[str], max_tokens: int, rounds: int,
    labels: tuple[str, ...] = tuple(ENGINES), *, warm: bool = False,
    after_round: Callable[[], None] | None = None,
) -> dict[str, EngineRun]:
    """Start each engine alone (its engine core in a process of its own, as a user's
    ``vllm.LLM`` runs: ``Engine``), then time them in alternation (``round_order``) for ``rounds``:
    the batch of ``prompts`` and the first prompt alone, ``max_tokens`` greedy tokens each;
    ``after_round`` runs after every round. ``warm``: once all are stopped, start each engine
    alone once more in a new process on the compile cache its first start filled (engine ready
    warm)."""
    engines: list[Engine] = []
    try:
        for label in labels:
            engine = Engine(label, model, root, max_num_seqs=len(prompts), engine_process=True)
            engines.append(engine)
            engine.start()
            # Untimed: the batch and the single stream once at the prompts' own lengths, so
            # the first round pays no first-use costs (kernel set-up for new shapes).
            engine.generate(prompts, WARM_UP_TOKENS)
            engine.generate(prompts[:1], WARM_UP_TOKENS)
        for r in range(rounds):
            order = round_order(engines, r)
            # The engines' batches back to back, then their single streams: each ratio compares
            # runs a few seconds apart, inside the same spell of whatever else the host runs.
            for engine in order:
                rate, cpu_rate, tokens = engine.generate(prompts, max_tokens)
                engine.run.batch_rates.append(rate)
                engine.run.batch_cpu_rates.append(cpu_rate)
                engine.run.tokens = tokens
            for engine in order:
                rate, cpu_rate, _ = engine.generate(prompts[:1], max_tokens)
                engine.run.single_rates.append(rate)
                engine.run.single_cpu_rates.append(cpu_rate)
            if after_round is not None:
                after_round()
    finally:
        for engine in engines:
            engine.close()
    runs = {engine.run.label: engine.run for engine in engines}
    if warm:
        for label, run in runs.items():
            again = Engine(label, model, root, max_num_seqs=len(prompts), log_name="-warm",
                           engine_process=True)
            try:
                run.warm_startup_s = again.load()
            finally:
                again.close()
    return runs


def round_ratio(a: list[float], b: list[float]) -> float:
    """Median over rounds of ``a[i] / b[i]``."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def round_quartiles(a: list[float], b: list[float]) -> tuple[float, float]:
    """First and third quartiles over rounds of ``a[i] / b[i]``: the spread a median ratio
    comes from (this host's noise), printed beside it."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    if len(ratios) < 2:
        return ratios[0], ratios[0]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return q1, q3


def ratio_spread(name: str, a: list[float], b: list[float]) -> str:
    q1, q3 = round_quartiles(a, b)
    return f"{name} {q1:.3f}-{q3:.3f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"
