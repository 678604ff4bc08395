"""Per-rank report files (``VLLM_ASCEND_RANK_REPORT_DIR``), written at each stage."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_ascend.base.trusted_paths import write_atomic
from vllm_ascend.compilation.pass_manager import fusion_report, fusion_sites
from vllm_ascend.engine.capture_tally import CaptureTally
from vllm_ascend.engine.ready_watch import ReadyWatch
from vllm_ascend.engine.registry import peek_engine
from vllm_ascend.worker_duties.cpu_binding import WorkerBinding, host_rank

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

REPORT_DIR_ENV = "VLLM_ASCEND_RANK_REPORT_DIR"


def report_name(dp_rank: int, rank: int) -> str:
    """File name of a rank's report."""
    return f"dp{dp_rank}-rank{rank}.json"


def build_rank_report(vllm_config: VllmConfig, *, rank: int, local_rank: int,
                      binding: WorkerBinding | None, stage: str,
                      engine_local_rank: int | None = None,
                      device: str | None = None) -> dict[str, Any]:
    """The report of this worker process at ``stage`` ("device", "warmed_up" or "serving")."""
    engine = peek_engine(vllm_config)  # reading stores nothing
    captures = engine.captures if engine is not None else CaptureTally()
    watch = engine.ready if engine is not None else ReadyWatch()

    par = vllm_config.parallel_config
    # vLLM resets data_parallel_rank to 0 in each engine of a dense model (its DP ranks are
    # independent engines); data_parallel_index keeps the engine's DP rank.
    dp_rank = getattr(par, "data_parallel_index", None)
    return {
        "stage": stage,
        "pid": os.getpid(),
        "dp_rank": int(par.data_parallel_rank if dp_rank is None else dp_rank),
        "rank": rank,
        "local_rank": local_rank,
        "host_rank": host_rank(par, local_rank if engine_local_rank is None
                               else engine_local_rank),
        "device": device,
        # The NPU whose CPU pool was planned, and that pool (applied or not: cpus_allowed and
        # the binding lines say which).
        "npu": binding.npu if binding is not None else None,
        "planned_pool": list(binding.planned_pool) if binding is not None else [],
        "tensor_parallel_size": int(par.tensor_parallel_size),
        "pipeline_parallel_size": int(par.pipeline_parallel_size),
        "soc": binding.soc if binding is not None else None,
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "bound_cpus": list(binding.cpus) if binding is not None else [],
        "binding": list(binding.lines) if binding is not None else [],
        # This engine's fusion (not another engine's of the same process).
        "fusion": fusion_report(vllm_config),
        # Candidate against rewritten sites per pass; from_cache: graphs loaded, not compiled.
        "fusion_sites": fusion_sites(vllm_config),
        # Graphs this rank captured and the seconds it spent capturing (none on vLLM CPU).
        "captures": captures.as_report(),
        # Dynamo compiles and pass-manager runs, and what ran after the engine was ready.
        **watch.as_report(),
    }


def write_rank_report(report: Mapping[str, Any],
                      environ: Mapping[str, str] | None = None) -> Path | None:
    """Write ``report`` atomically (no-op when the directory is unset); a failure is one warning."""
    env = os.environ if environ is None else environ
    directory = env.get(REPORT_DIR_ENV)
    if not directory:
        return None

    target = Path(directory) / report_name(int(report["dp_rank"]), int(report["rank"]))
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(target, json.dumps(report, indent=2, sort_keys=True).encode("utf-8"))
    except (OSError, TypeError, ValueError) as exc:
        logger.warning("rank report not written to %s: %s", target, exc)
        return None
    return target


def read_rank_reports(directory: str | Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The reports under ``directory`` keyed by (dp_rank, rank)."""
    reports = {}
    for path in sorted(Path(directory).glob("dp*-rank*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        reports[(int(data["dp_rank"]), int(data["rank"]))] = data
    return reports
