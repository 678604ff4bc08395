"""Fused ``torch.ops.ascend`` reference ops against their unfused compositions on CPU.

For each fused op and dtype, the fused op and its unfused composition (the registered ops,
whole-tensor references, allocation and first-touch page faults included) run interleaved, one
call of each per round, median over the rounds. A ``copy_`` moving the same number of bytes as
the fused op's minimum traffic (inputs read once + outputs written once) is timed in the same
rounds, so the achieved bandwidth is stated against what this machine does right now. This is
an eager micro-benchmark: compiled host-CPU graphs inline the same references
(``ascend_kernels.inductor_lowering``), which the ``e2e`` benchmark measures.

Timing uses the process's CPU time (user + system, so page faults count) with one intra-op
thread: the 2-core machine is shared with other jobs, and wall-clock medians of identical calls
swung by 10x between rounds there, while CPU time stayed within a few percent.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend)
import torch

from benchmarks.table import Table

A = torch.ops.ascend
EPS = 1e-6
TARGET = 1.05


@dataclass
class Case:
    """One fused op with its unfused composition."""

    name: str
    inputs: tuple[torch.Tensor, ...]
    fused: Callable[[], Any]
    unfused: Callable[[], Any]


def _norm_cases(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> list[Case]:
    scale, offset = torch.tensor([0.02]), torch.tensor([0.0])
    return [
        Case(
            "add_rms_norm",
            (x, r, w),
            lambda: A.add_rms_norm(x, r, w, EPS),
            lambda: (A.rms_norm(s := x + r, w, EPS), s),
        ),
        Case(
            "add_rms_norm_quant",
            (x, r, w),
            lambda: A.add_rms_norm_quant(x, r, w, scale, offset, EPS),
            lambda: A.quantize(A.add_rms_norm(x, r, w, EPS)[0], scale, offset),
        ),
        Case(
            "add_rms_norm_dynamic_quant",
            (x, r, w),
            lambda: A.add_rms_norm_dynamic_quant(x, r, w, EPS),
            lambda: A.dynamic_quant(A.add_rms_norm(x, r, w, EPS)[0]),
        ),
        Case(
            "add_rms_norm_dynamic_mx_quant",
            (x, r, w),
            lambda: A.add_rms_norm_dynamic_mx_quant(x, r, w, EPS),
            lambda: A.dynamic_mx_quant(A.add_rms_norm(x, r, w, EPS)[0]),
        ),
        Case(
            "rms_norm_dynamic_mx_quant",
            (x, w),
            lambda: A.rms_norm_dynamic_mx_quant(x, w, EPS),
            lambda: A.dynamic_mx_quant(A.rms_norm(x, w, EPS)),
        ),
        Case("muls_add", (x, r), lambda: A.muls_add(x, r, 0.5), lambda: x * 0.5 + r),
    ]


def _split_case(qkv: torch.Tensor, head: int) -> Case:
    tokens, width = qkv.shape
    q_size, kv_size = width // 2, width // 4
    g = torch.Generator().manual_seed(1)
    qw = torch.randn(head, generator=g).to(qkv.dtype)
    kw = torch.randn(head, generator=g).to(qkv.dtype)
    cache = torch.randn(8192, head, generator=g).to(qkv.dtype)
    pos = torch.randint(0, 8192, (tokens,), generator=g)
    args = (qkv, qw, kw, pos, cache, q_size, kv_size, head, head, True, EPS)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(tokens, -1, head)

    def unfused() -> Any:
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q_n = A.rms_norm(heads(q), qw, EPS).view(tokens, q_size)
        k_n = A.rms_norm(heads(k), kw, EPS).view(tokens, kv_size)
        return (*A.rotary_embedding(pos, q_n, k_n, cache, head, head, True), v)

    return Case("split_qkv_rmsnorm_rope", (qkv,), lambda: A.split_qkv_rmsnorm_rope(*args),
                unfused)


def _flat(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for item in result for t in _flat(item)] if isinstance(result, (tuple, list)) else []


def _timed(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _measure(case: Case, runs: int) -> dict[str, float]:
    fused_outputs = _flat(case.fused())
    moved = sum(t.nbytes for t in case.inputs) + sum(t.nbytes for t in fused_outputs)
    src = torch.ones(moved // 2, dtype=torch.uint8)
    dst = torch.zeros_like(src)
    variants = {
        "copy": lambda: dst.copy_(src),
        "fused": case.fused,
        "unfused": case.unfused,
    }
    for fn in variants.values():  # warm-up: page mapping, dispatch caches
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            samples[name].append(_timed(fn))
    result = {name: statistics.median(values) for name, values in samples.items()}
    result["bytes"] = float(moved)
    return result


MULTI_PASS = {
    "split_qkv_rmsnorm_rope": "copies v once more than the composition (which returns a view of "
    "qkv): an op's outputs may not alias its inputs",
}


def run(quick: bool = False) -> list[Table]:
    """Benchmark every fused reference op; ``quick`` uses a small shape and 5 rounds."""
    rows, hidden, runs = (256, 1024, 5) if quick else (4096, 4096, 11)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        table_rows, verdicts = _run_all(rows, hidden, runs)
    finally:
        torch.set_num_threads(threads)
    return [_table(rows, hidden, runs, table_rows, verdicts)]


def _run_all(rows: int, hidden: int, runs: int) -> tuple[list[list[Any]], list[bool]]:
    table_rows: list[list[Any]] = []
    verdicts: list[bool] = []
    for dtype in (torch.bfloat16, torch.float32):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, hidden, generator=g).to(dtype)
        r = torch.randn(rows, hidden, generator=g).to(dtype)
        w = (torch.randn(hidden, generator=g) + 1).to(dtype)
        cases = [*_norm_cases(x, r, w), _split_case(x, 128)]
        for case in cases:
            m = _measure(case, runs)
            ratio = m["fused"] / m["unfused"]
            gbps = m["bytes"] / m["fused"] / 1e9
            copy_gbps = m["bytes"] / m["copy"] / 1e9
            ok = ratio <= TARGET
            verdicts.append(ok)
            table_rows.append(
                [
                    case.name,
                    str(dtype).removeprefix("torch."),
                    m["fused"] * 1e3,
                    m["unfused"] * 1e3,
                    ratio,
                    gbps,
                    copy_gbps,
                    f"{100 * gbps / copy_gbps:.0f}%",
                    "ok" if ok else "MISS",
                ]
            )
    return table_rows, verdicts


def _table(
    rows: int, hidden: int, runs: int, table_rows: list[list[Any]], verdicts: list[bool]
) -> Table:
    notes = [
        f"Shape {rows}x{hidden} (split_qkv_rmsnorm_rope: qkv {rows}x{hidden} = q {hidden // 2} + "
        f"k {hidden // 4} + v {hidden // 4}, head 128, full rotary), median of {runs} "
        "interleaved rounds after one warm-up; times in ms of process CPU time on one intra-op "
        "thread (the machine is shared; wall-clock medians were not reproducible).",
        f"Target: fused <= {TARGET}x unfused; {sum(verdicts)}/{len(verdicts)} rows meet it.",
        "Both sides are the registered torch.ops.ascend ops (whole-tensor references), output "
        "allocation and first-touch page faults included.",
        "GB/s = fused op's minimum traffic (inputs read once + outputs written once) / fused "
        "time; copy GB/s = a copy_ of the same bytes timed in the same rounds.",
        "The references are whole-tensor torch expressions (the same functions inductor inlines "
        "for compiled graphs), so each float32 step is a pass over the tensor in eager mode.",
        *(f"Multi-pass: {name} {why}." for name, why in MULTI_PASS.items()),
        "The unfused side is the same reference ops run one after another with the "
        "intermediate in memory (and eager `x * s + y` for muls_add).",
    ]
    columns = [
        "op",
        "dtype",
        "fused",
        "unfused",
        "ratio",
        "fused GB/s",
        "copy GB/s",
        "of copy",
        "verdict",
    ]
    return Table("Fused vs unfused reference kernels (CPU)", columns, table_rows, notes)
