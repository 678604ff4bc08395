"""The per-rank setup of a worker process: what needs the local rank, before the model loads.

Called by the host-CPU worker (``runtime.cpu_worker``) and, on NPU hosts, by the runtime's
worker in ``init_device`` (README "Per-rank CPU binding").
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from vllm_ascend.base.cpu_binding import WorkerBinding, bind_this_worker
from vllm_ascend.base.npu_device import setup_local_comm_res
from vllm_ascend.process.process_setup import current_process_setup

logger = logging.getLogger("vllm_ascend.process.worker_setup")


def prepare_worker(vllm_config: Any, local_rank: int,
                   environ: MutableMapping[str, str] | None = None) -> WorkerBinding:
    """Load this rank's local communication endpoints (``ASCEND_LOCAL_COMM_RES``, when
    ``kv_connector_extra_config.ascend_local_comm_res_path`` names them), then bind the
    process to its CPU pool (:func:`bind_this_worker`, recorded in this process's
    ``ProcessSetup.cpu_binding``).

    A bad endpoint file is a ``ValueError`` naming it: the worker cannot join its KV transfer
    group without it, so it stops at start-up rather than at the first transfer.
    """
    kv = getattr(vllm_config, "kv_transfer_config", None)
    extra = dict(getattr(kv, "kv_connector_extra_config", None) or {})
    if setup_local_comm_res(local_rank, extra, environ) is not None:
        logger.info("local rank %d: ASCEND_LOCAL_COMM_RES loaded from %s", local_rank,
                    extra["ascend_local_comm_res_path"])
    process = current_process_setup()
    binding = bind_this_worker(vllm_config, local_rank, process, environ)
    process.cpu_binding = list(binding.lines)
    return binding
