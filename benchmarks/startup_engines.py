"""Engine ready, cold and warm, and its phases: stock vLLM CPU against the plugin, side by side.

Each start is a new worker process (``e2e_engines.engine_setup``: stock is vLLM with no plugin,
the plugin is the host-CPU platform with the Ascend fusion passes on) building one `vllm.LLM`.
Cold: a fresh ``VLLM_CACHE_ROOT`` (inductor's cache inside it); warm: a new process on the root
the cold start filled. Phases, measured in the worker (``vllm_ascend_testing.startup_phases``):
import (``from vllm import LLM``), load (model built, weights loaded), compile (torch.compile:
Dynamo + inductor, vLLM's AOT compile, or the load from the compile cache), warm-up (the rest
of the first forward; vLLM CPU captures no graphs); other is what remains of engine ready
(config, tokenizer, KV cache). Engine ready = import + building the engine.

Targets (reported, not asserted), per model: the plugin's warm compile phase <= 0.2x its cold
one, and the plugin's warm engine ready <= 0.6x stock's warm.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.table import Table

ENGINE_LABELS = {"stock": "stock", "plugin": "fusion on"}  # row name -> e2e engine label
STARTS = ("cold", "warm")
PHASES = ("import", "load", "compile", "warm_up")
COMPILE_TARGET = 0.2  # plugin: warm compile / cold compile
WARM_READY_TARGET = 0.6  # warm engine ready: plugin / stock
MAX_NUM_SEQS = 16  # the e2e benchmark's batch
WARM_LINE = re.compile(r"warm start: loaded (\d+) compiled artifacts from (.+) in ([0-9.]+) s")


@dataclass
class Start:
    """One engine start: seconds per phase, engine ready, and what the warm-start line said
    (``loaded``: artifacts, None when the process logged no such line)."""

    model: str
    engine: str
    start: str
    phases: dict[str, float]
    ready_s: float
    loaded: int | None = None


def warm_line_count(log_text: str) -> int | None:
    """Artifacts named by the plugin's warm-start line in a worker's log; None without one."""
    found = WARM_LINE.findall(log_text)
    return sum(int(count) for count, _, _ in found) if found else None


def start_engine(engine: str, model: Path, root: Path, log_name: str) -> Start:
    """Start ``engine`` ("stock" or "plugin") on ``model`` in a new worker whose compile cache
    lives under ``root``, then stop it."""
    from vllm_ascend_testing.worker_client import LLMWorker

    from benchmarks.e2e_engines import engine_setup

    env, kwargs = engine_setup(ENGINE_LABELS[engine], model, root, MAX_NUM_SEQS)
    log = root / f"{engine}-{log_name}.log"
    worker = LLMWorker(env, log)
    try:
        answer = worker.request("load", name="ready", kwargs=kwargs, timeout=1800)
    finally:
        worker.close()
    phases = {"import": float(answer["import_s"]),
              **{k: float(v) for k, v in answer["phases"].items()}}
    return Start(model.name, engine, log_name, phases,
                 float(answer["import_s"]) + float(answer["startup_s"]),
                 warm_line_count(log.read_text(errors="replace")))


def measure_starts(name: str, model: Path, root: Path, repeats: int) -> list[Start]:
    """``repeats`` times: both engines cold on a fresh root, then warm on it (engine order
    alternating between repeats); one median row per engine and start."""
    runs: dict[tuple[str, str], list[Start]] = {}
    for r in range(repeats):
        engines = list(ENGINE_LABELS) if r % 2 == 0 else list(ENGINE_LABELS)[::-1]
        base = root / f"{name}-{r}"
        for start in STARTS:
            for engine in engines:
                run = start_engine(engine, model, base, start)
                run.model = name
                runs.setdefault((engine, start), []).append(run)
    return [median_start(runs[(engine, start)])
            for engine in ENGINE_LABELS for start in STARTS]


def median_start(runs: list[Start]) -> Start:
    """Per phase and engine ready, the median over repeats."""
    first = runs[0]
    loaded = [run.loaded for run in runs if run.loaded is not None]
    return Start(first.model, first.engine, first.start,
                 {phase: statistics.median(run.phases[phase] for run in runs)
                  for phase in PHASES},
                 statistics.median(run.ready_s for run in runs),
                 min(loaded) if loaded else None)


def other_s(start: Start) -> float:
    """Engine ready not covered by the phases."""
    return start.ready_s - sum(start.phases[phase] for phase in PHASES)


def _find(starts: list[Start], model: str, engine: str, start: str) -> Start:
    return next(s for s in starts if (s.model, s.engine, s.start) == (model, engine, start))


def model_ratios(starts: list[Start], model: str) -> dict[str, float]:
    """The ratios the targets read, from one model's rows."""
    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else float("inf")

    get = {(s.engine, s.start): s for s in starts if s.model == model}
    return {
        "plugin compile warm/cold": ratio(get["plugin", "warm"].phases["compile"],
                                          get["plugin", "cold"].phases["compile"]),
        "stock compile warm/cold": ratio(get["stock", "warm"].phases["compile"],
                                         get["stock", "cold"].phases["compile"]),
        "warm ready plugin/stock": ratio(get["plugin", "warm"].ready_s,
                                         get["stock", "warm"].ready_s),
        "cold ready plugin/stock": ratio(get["plugin", "cold"].ready_s,
                                         get["stock", "cold"].ready_s),
    }


def startup_tables(starts: list[Start], repeats: int) -> list[Table]:
    """The phases table (a row per model x engine x start) and the ratios with verdicts."""
    rows: list[list[Any]] = []
    for s in starts:
        loaded = "" if s.engine == "stock" else (s.loaded or 0)
        rows.append([s.model, s.engine, s.start,
                     *(round(s.phases[phase], 2) for phase in PHASES),
                     round(other_s(s), 2), round(s.ready_s, 2), loaded])
    models = list(dict.fromkeys(s.model for s in starts))
    ratio_rows: list[list[Any]] = []
    for model in models:
        ratios = model_ratios(starts, model)
        compile_ok = ratios["plugin compile warm/cold"] <= COMPILE_TARGET
        ready_ok = ratios["warm ready plugin/stock"] <= WARM_READY_TARGET
        ratio_rows.append([model, *(round(value, 3) for value in ratios.values()),
                           "met" if compile_ok else "NOT MET", "met" if ready_ok else "NOT MET"])
    phases = Table(
        "Engine ready, cold and warm, by phase (seconds; stock vLLM CPU vs the plugin)",
        ["model", "engine", "start", "import s", "load s", "compile s", "warm-up s",
         "other s", "ready s", "cache loads"], rows,
        [f"Median of {repeats} repeat(s); each start a new process. Cold: fresh "
         "VLLM_CACHE_ROOT; warm: the root the cold start filled. import: `from vllm import "
         "LLM`; load: model built and weights loaded; compile: torch.compile (Dynamo + "
         "inductor, vLLM's AOT compile, or the load from the compile cache); warm-up: the rest "
         "of the "
         "first forward (vLLM CPU captures no graphs); other: config, tokenizer, KV cache.",
         "cache loads: artifacts named by the plugin's warm-start log line ('warm start: "
         "loaded N compiled artifacts from DIR in X s'; 0: no such line)."])
    ratios_table = Table(
        "Engine ready: warm vs cold and plugin vs stock (ratios of the rows above)",
        ["model", *model_ratios(starts, models[0]), f"compile warm <= {COMPILE_TARGET}x cold",
         f"warm ready <= {WARM_READY_TARGET}x stock"], ratio_rows,
        [f"Targets (reported): the plugin's warm compile phase <= {COMPILE_TARGET}x its cold "
         f"one; the plugin's warm engine ready <= {WARM_READY_TARGET}x stock's warm."])
    return [phases, ratios_table]
