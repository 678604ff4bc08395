"""ascend-config: time to resolve the example configs and to import the package.

``python -m benchmarks config [--quick]``. Targets: median ``resolve`` < 2 ms per example
config; ``import ascend_config`` < 150 ms in a fresh interpreter (measured with
``-X importtime``; wall-clock interpreter start-up is shown beside it as the baseline);
rejecting a config of N unknown keys grows linearly with N (4x the keys costs < 6x the time).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.table import Table

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RESOLVE_TARGET_MS = 2.0
IMPORT_TARGET_MS = 150.0
SCALING_TARGET = 6.0  # 4x the input may cost at most 6x the time (linear plus noise)


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first call builds pydantic/introspection caches
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _valid_examples() -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, str]]]:
    out = []
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "expected.json").exists()):
        expected = json.loads((folder / "expected.json").read_text())
        if expected["exit_code"] != 0:
            continue
        config = json.loads((folder / "additional_config.json").read_text())
        facts = json.loads((folder / "facts.json").read_text())
        out.append((folder.name, config, facts, expected["env"]))
    return out


def resolve_table(quick: bool) -> Table:
    from ascend_config import AscendConfig, DeploymentFacts, resolve

    repeats = 30 if quick else 400
    rows: list[list[Any]] = []
    medians = []
    for name, config, facts_dict, env in _valid_examples():
        facts = DeploymentFacts.from_mapping(facts_dict)
        cfg = resolve(config, facts, env)
        text = cfg.to_json()
        res_ms = _median_ms(lambda c=config, f=facts, e=env: resolve(c, f, e), repeats)
        load_ms = _median_ms(lambda t=text: AscendConfig.from_json(t), repeats)
        medians.append(res_ms)
        rows.append([name, round(res_ms, 3), round(load_ms, 3), round(res_ms / load_ms, 1)])
    overall = statistics.median(medians)
    verdict = "PASS" if overall < RESOLVE_TARGET_MS else "FAIL"
    return Table(
        title="ascend-config: resolve() per example config (median of "
              f"{repeats} runs each)",
        columns=["example", "resolve ms", "from_json ms (worker path)", "resolve / from_json"],
        rows=rows,
        notes=[f"median over examples: {overall:.3f} ms; target < {RESOLVE_TARGET_MS} ms: "
               f"{verdict}",
               "from_json is what a worker does with the engine's serialised config; the ratio "
               "is the cost of validating every rule versus just loading the result"],
    )


def _fresh(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)


def _importtime_ms(module: str, code: str) -> float:
    stderr = _fresh(code, "-X", "importtime").stderr
    for line in stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module and parts[1].isdigit():
            return int(parts[1]) / 1e3
    return float("nan")


def _wall_ms(code: str) -> float:
    start = time.perf_counter()
    _fresh(code)
    return (time.perf_counter() - start) * 1e3


def import_table(quick: bool) -> Table:
    runs = 3 if quick else 9
    cases = [
        ("interpreter only (baseline)", "pass", None),
        ("import ascend_config", "import ascend_config", "ascend_config"),
        ("import ascend_config.envs + read", "import ascend_config.envs as e; "
         "e.VLLM_ASCEND_DEVICE", "ascend_config.envs"),
        ("first resolve({}) (loads pydantic + schema)",
         "import ascend_config.resolver as r; r.resolve({})", "ascend_config.resolver"),
    ]
    rows: list[list[Any]] = []
    base = statistics.median(_wall_ms("pass") for _ in range(runs))
    package_ms = float("nan")
    for label, code, module in cases:
        wall = base if module is None else statistics.median(_wall_ms(code) for _ in range(runs))
        cumulative = (statistics.median(_importtime_ms(module, code) for _ in range(runs))
                      if module else 0.0)
        if module == "ascend_config":
            package_ms = cumulative
        rows.append([label, round(wall, 1), round(wall - base, 1), round(cumulative, 2)])
    verdict = "PASS" if package_ms < IMPORT_TARGET_MS else "FAIL"
    return Table(
        title=f"ascend-config: import cost in a fresh interpreter (median of {runs})",
        columns=["case", "wall ms", "wall minus baseline ms", "-X importtime cumulative ms"],
        rows=rows,
        notes=[f"import ascend_config: {package_ms:.2f} ms; target < {IMPORT_TARGET_MS} ms: "
               f"{verdict}",
               "names are loaded lazily (PEP 562); envs/facts are stdlib-only, pydantic loads "
               "on the first resolve"],
    )


def _reject_ms(keys: int, repeats: int) -> float:
    from ascend_config import AscendConfigError, resolve

    config = {f"unknown_key_number_{i}": i for i in range(keys)}

    def once() -> None:
        with contextlib.suppress(AscendConfigError):
            resolve(config, environ={})

    return _median_ms(once, repeats)


def scaling_table(quick: bool) -> Table:
    """Bad input of growing size: every unknown key is one error, work must stay linear."""
    sizes = (500, 2_000) if quick else (2_500, 10_000, 40_000)
    repeats = 3 if quick else 5
    times = [_reject_ms(n, repeats) for n in sizes]
    rows = [[n, round(ms, 2), round(1e3 * ms / n, 2),
             round(ms / times[i - 1], 2) if i else ""] for i, (n, ms) in enumerate(zip(
                 sizes, times, strict=True))]
    worst = max(times[i] / times[i - 1] for i in range(1, len(times)))
    verdict = "PASS" if worst < SCALING_TARGET else "FAIL"
    return Table(
        title=f"ascend-config: rejecting N unknown keys (median of {repeats})",
        columns=["unknown keys", "resolve ms", "us per key", "time ratio for 4x keys"],
        rows=rows,
        notes=[f"worst ratio {worst:.2f} for 4x the keys; target < {SCALING_TARGET}: "
               f"{verdict} (quadratic work would give about 16)",
               "the error lists the first 50 problems and counts the rest"],
    )


def run(quick: bool = False) -> list[Table]:
    """All tables; ``quick`` uses fewer repetitions and smaller inputs."""
    return [resolve_table(quick), import_table(quick), scaling_table(quick)]
