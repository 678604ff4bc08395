"""The per-rank duties of an Ascend worker, written once for the host-CPU and the NPU worker."""

from __future__ import annotations

import logging
import weakref
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_ascend.base.npu_device import setup_local_comm_res
from vllm_ascend.engine import AscendEngine, engine_of
from vllm_ascend.process.process_setup import ProcessSetup, current_process_setup
from vllm_ascend.worker_duties.cpu_binding import WorkerBinding, bind_this_worker
from vllm_ascend.worker_duties.rank_report import build_rank_report, write_rank_report

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)


def load_comm_endpoints(vllm_config: VllmConfig, local_rank: int,
                        environ: MutableMapping[str, str] | None = None) -> None:
    """Load this rank's ``ASCEND_LOCAL_COMM_RES`` when the KV connector config names the file."""
    # A bad file is a ValueError at start-up rather than at the first transfer.
    kv = getattr(vllm_config, "kv_transfer_config", None)
    extra = dict(getattr(kv, "kv_connector_extra_config", None) or {})
    if setup_local_comm_res(local_rank, extra, environ) is not None:
        logger.info("local rank %d: ASCEND_LOCAL_COMM_RES loaded from %s", local_rank,
                    extra["ascend_local_comm_res_path"])


def bind_rank(vllm_config: VllmConfig, local_rank: int, engine: AscendEngine,
              process: ProcessSetup,
              environ: MutableMapping[str, str] | None = None, *,
              npu: int | None = None) -> WorkerBinding:
    """This rank's endpoints, then its CPU pool (of NPU ``npu``; None: from ``local_rank``)."""
    # On an NPU the SoC is read once per process from the device: call it after set_device.
    load_comm_endpoints(vllm_config, local_rank, environ)
    soc: str | None = engine.soc
    error = None
    if soc != "cpu":
        try:  # this worker's own NPU, read once in this process
            soc = process.device_soc()
        except Exception as exc:  # never fatal here; the platform reports it where it matters
            soc, error = None, f"CPU binding skipped: {exc}"
    if error is not None and engine.config.enable_cpu_binding:
        logger.warning("%s", error)
        binding = WorkerBinding(local_rank, lines=[error])
    else:
        binding = bind_this_worker(vllm_config.parallel_config, local_rank, soc, engine.config,
                                   process.cross_check_soc, environ, npu=npu)
    process.cpu_binding = list(binding.lines)
    return binding


class RankDuties:
    """Per-rank duties mixin (``class W(RankDuties, VllmWorker)``) holding the worker's engine."""
    # engine_local_rank: vLLM's local rank when local_rank became an NPU device index (None:
    # unchanged); ascend_npu: the NPU an NPU worker drives.

    vllm_config: VllmConfig
    rank: int
    local_rank: int
    engine_local_rank: int | None = None
    ascend_engine: AscendEngine
    ascend_npu: int | None = None
    ascend_binding: WorkerBinding | None = None

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        self.ascend_engine = engine_of(vllm_config)
        super().__init__(vllm_config, *args, **kwargs)  # type: ignore[call-arg]

    def bind_rank(self) -> WorkerBinding:
        """This rank's endpoints and CPU pool (:func:`bind_rank`)."""
        self.ascend_binding = bind_rank(self.vllm_config, self.local_rank, self.ascend_engine,
                                        current_process_setup(), npu=self.ascend_npu)
        return self.ascend_binding

    def bind_late_threads(self) -> list[str]:
        """Bind the threads the device runtime started since :meth:`bind_rank`."""
        if self.ascend_binding is None:
            return []
        lines = self.ascend_binding.bind_late_threads()
        current_process_setup().cpu_binding = list(self.ascend_binding.lines)
        return lines

    def report_rank(self, stage: str) -> Path | None:
        """Write this rank's report for ``stage`` ("device", "warmed_up", "serving")."""
        device = getattr(self, "device", None)
        return write_rank_report(build_rank_report(
            self.vllm_config, rank=self.rank, local_rank=self.local_rank,
            binding=self.ascend_binding, stage=stage, engine_local_rank=self.engine_local_rank,
            device=None if device is None else str(device)))

    def mark_engine_ready(self) -> None:
        """Mark the engine ready; every later compile or capture writes the report again."""
        # Weakly: the engine lives as long as its VllmConfig, and a worker reached from it would
        # keep that config, the model and its device memory alive after the LLM is freed.
        report = weakref.WeakMethod(self._report_serving)

        def report_serving() -> None:
            method = report()
            if method is not None:
                method()

        self.ascend_engine.mark_ready(report_serving)
        self.report_rank("warmed_up")

    def _report_serving(self) -> None:
        self.report_rank("serving")
