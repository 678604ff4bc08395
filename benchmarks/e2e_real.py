"""End to end on a real model: SmolLM2-135M-Instruct (bf16) through the e2e engines.

The same three engines and carryover-balanced rounds as the tiny models (``bench_e2e``), on
chat questions rendered by the model's own chat template, plus what a real model adds: engine
ready warm (each engine started again, alone, in a new process on the compile cache its first
start filled) and the single-stream ceiling of this host (``decode_ceiling``: weight bytes per
decode step over the read bandwidth measured after every round of the same run).

Targets (reported, not asserted): fusion on >= 1.1x stock tokens/s for the batch and the single
stream, and engine ready warm <= 0.6x stock's.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.decode_ceiling import (
    Bandwidth,
    ceiling_tokens_per_s,
    checkpoint_weight_bytes,
    read_bandwidth,
)
from benchmarks.e2e_engines import ENGINES, EngineRun
from benchmarks.e2e_rounds import measure_engines, ratio_spread, round_ratio, verdict
from benchmarks.table import Table

REAL_MODEL = "smollm2"

QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "How many days are in a leap year?",
    "What does a thermometer measure?",
    "Write one sentence about the ocean.",
    "What is 12 times 12?",
    "Who wrote Romeo and Juliet?",
    "Why is the sky blue?",
    "Give me a synonym for happy.",
    "What gas do plants take in from the air?",
    "How do I boil an egg?",
    "What is the largest planet in the solar system?",
    "Translate 'good morning' into Spanish.",
    "What is a prime number?",
    "Suggest a name for a pet cat.",
    "What is the freezing point of water in Celsius?",
]
SPEED_TARGET = 1.1  # fusion on / stock, tokens/s (batch and single stream)
WARM_READY_TARGET = 0.6  # fusion on / stock, engine ready on a warm compile cache
DTYPE_BYTES = 2  # the run's dtype, bfloat16


@dataclass(frozen=True)
class RealSize:
    """Workload of one real-model run."""

    max_tokens: int
    rounds: int
    labels: tuple[str, ...]


# 24 rounds: four times each of the six orders of three engines.
REAL_FULL = RealSize(max_tokens=64, rounds=24, labels=tuple(ENGINES))
# The code path at its smallest: one round, a few tokens, stock against fusion on.
REAL_QUICK = RealSize(max_tokens=4, rounds=1, labels=("stock", "fusion on"))


def check_model_dir(model_dir: str | Path) -> Path:
    """``model_dir`` if it is a Hugging Face checkpoint directory (config.json, safetensors
    weights, a tokenizer with a chat template); a clear error naming what is missing if not."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"--model-dir {model_dir}: no such directory")
    wanted = {"config.json": "config.json", "*.safetensors": "safetensors weights",
              "tokenizer*.json": "a tokenizer"}
    missing = [what for pattern, what in wanted.items() if not any(model_dir.glob(pattern))]
    if missing:
        raise FileNotFoundError(f"--model-dir {model_dir} is not a Hugging Face checkpoint "
                                f"directory: it has no {', '.join(missing)}")
    return model_dir


def chat_prompts(model_dir: Path, questions: list[str]) -> list[str]:
    """Each question as one user turn rendered by the model's chat template, ready for the
    assistant's answer (the text the engines tokenize; the template's own special tokens
    included, so nothing is added in front)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if not tokenizer.chat_template:
        raise ValueError(f"{model_dir}: the tokenizer has no chat template")
    return [
        str(tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                          add_generation_prompt=True))
        for q in questions
    ]


def model_label(model_dir: Path) -> str:
    """The model's name for the table: its directory's name, layers and hidden size."""
    config = json.loads((model_dir / "config.json").read_text())
    layers, hidden = config.get("num_hidden_layers"), config.get("hidden_size")
    return f"{model_dir.name} ({layers} layers, hidden {hidden})"


def pass_sites(report: dict[str, int]) -> str:
    """The Ascend passes that rewrote sites and how many, by name (``none`` if no pass did)."""
    found = [f"{name} {count}" for name, count in sorted(report.items()) if count]
    return ", ".join(found) or "none"


def measure_real(model_dir: Path, size: RealSize, root: Path
                 ) -> tuple[dict[str, EngineRun], Bandwidth]:
    """The engines of ``size.labels`` on the checkpoint, with warm starts, and the read
    bandwidth sampled after every round."""
    prompts = chat_prompts(model_dir, QUESTIONS)
    bandwidth = Bandwidth(samples=[])

    def sample() -> None:
        bandwidth.samples.extend(read_bandwidth(repeats=3))

    runs = measure_engines(model_dir, root / f"{REAL_MODEL}-run", prompts, size.max_tokens,
                           size.rounds, size.labels, warm=True, after_round=sample)
    return runs, bandwidth


def real_table(title_model: str, size: RealSize, runs: dict[str, EngineRun],
               weight_bytes: int, bandwidth: Bandwidth) -> Table:
    """Tokens/s (with the fraction of the single-stream ceiling), engine ready cold and warm
    and peak RSS per engine, with ratios to stock; targets and the ceiling in the notes."""
    stock = runs["stock"]
    ceiling = ceiling_tokens_per_s(bandwidth.median(), weight_bytes)
    rows = []
    for label, run in runs.items():
        single = statistics.median(run.single_rates)
        rows.append([
            label,
            round(statistics.median(run.batch_rates), 1),
            round(round_ratio(run.batch_rates, stock.batch_rates), 3),
            round(single, 1),
            round(round_ratio(run.single_rates, stock.single_rates), 3),
            round(single / ceiling, 3),
            round(run.startup_s, 1),
            round(run.warm_startup_s, 1),
            round(run.warm_startup_s / stock.warm_startup_s, 3),
            round(run.peak_rss_mib),
            round(run.peak_rss_mib / stock.peak_rss_mib, 3),
            "same" if run.tokens == stock.tokens else "differ",
            pass_sites(run.report) if label != "stock" else "",
        ])
    on = runs["fusion on"]
    checks = {
        "batch on/stock": round_ratio(on.batch_rates, stock.batch_rates) >= SPEED_TARGET,
        "single on/stock": round_ratio(on.single_rates, stock.single_rates) >= SPEED_TARGET,
        "warm ready on/stock": on.warm_startup_s / stock.warm_startup_s <= WARM_READY_TARGET,
    }
    low, high = bandwidth.quartiles()
    notes = [
        f"{title_model}, bf16: a batch of {len(QUESTIONS)} chat questions (the model's chat "
        f"template) and a single stream (the first), {size.max_tokens} greedy tokens each; "
        f"{size.rounds} rounds, engines in carryover-balanced order; ratios are medians of "
        "per-round ratios to stock. Engine ready cold: fresh compile cache; warm: the engine "
        "started again alone in a new process on the cache its first start filled.",
        f"Single-stream ceiling: {weight_bytes / 1e6:.1f} MB of weights read per decode step "
        f"(bf16; tied embeddings once, as the lm_head) over {bandwidth.median() / 1e9:.2f} GB/s "
        f"read bandwidth (median of {len(bandwidth.samples)} torch.sum passes over 512 MiB "
        f"taken after every round; quartiles {low / 1e9:.2f}-{high / 1e9:.2f}) = "
        f"{ceiling:.1f} tokens/s; 'of ceiling' is the single-stream median over it.",
    ]
    spreads = [ratio_spread("on/stock batch", on.batch_rates, stock.batch_rates),
               ratio_spread("single", on.single_rates, stock.single_rates)]
    if "fusion off" in runs:
        off = runs["fusion off"]
        notes.append(
            f"fusion on / off: batch {round_ratio(on.batch_rates, off.batch_rates):.3f}x, "
            f"single {round_ratio(on.single_rates, off.single_rates):.3f}x, engine ready warm "
            f"{on.warm_startup_s / off.warm_startup_s:.3f}x; greedy tokens on "
            f"{'==' if on.tokens == off.tokens else '!='} off.")
        spreads += [ratio_spread("on/off batch", on.batch_rates, off.batch_rates),
                    ratio_spread("single", on.single_rates, off.single_rates)]
    notes += [
        "Per-round ratio quartiles (the spread of the medians above): " + ", ".join(spreads)
        + ".",
        "Targets (reported): " + "; ".join(f"{name} {verdict(ok)}" for name, ok in
                                           checks.items()) + ".",
        "Tokens/s include each prompt's prefill (the chat template adds a system turn: about "
        "37 prompt tokens). tokens: greedy tokens of the batch compared with stock's; Ascend "
        "pass sites: sites each pass rewrote (identical layers reuse one compiled graph).",
        "First answer (" + QUESTIONS[0] + "): " + "; ".join(
            f"{label}: {run.first_answer[:80]!r}" for label, run in runs.items()) + ".",
    ]
    columns = ["engine", "tokens/s batch", "vs stock", "tokens/s single", "vs stock",
               "of ceiling", "ready cold s", "ready warm s", "warm vs stock", "peak RSS MiB",
               "vs stock", "tokens", "Ascend pass sites"]
    return Table(f"End to end: {REAL_MODEL} real model (host-CPU platform vs stock vLLM CPU)",
                 columns, rows, notes)


def run_real(model_dir: Path, size: RealSize, root: Path) -> Table:
    """Measure the checkpoint in ``model_dir`` and tabulate it."""
    model_dir = check_model_dir(model_dir)
    weight_bytes = checkpoint_weight_bytes(model_dir, DTYPE_BYTES)
    runs, bandwidth = measure_real(model_dir, size, root)
    return real_table(model_label(model_dir), size, runs, weight_bytes, bandwidth)
