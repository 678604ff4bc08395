"""Which worker runs the engine, and what the chosen worker needs.

- NPU platform: the worker and scheduler classes in one explicit decision
  (:func:`select_worker_and_scheduler`). At most one scheduling policy may be active; the
  classes come from the ``vllm_ascend.npu_runtime`` / ``vllm_ascend.schedulers`` entry points of
  installed runtime packages. Nothing is chosen by the order of assignments.
- NPU platform, when this package's NPU runtime is the worker: vLLM's V1 model runner (model
  runner v2 is built from Triton kernels the NPU path does not have; vLLM would pick it wherever
  Triton imports), with NPU graphs unless the user asks for eager mode.
- Host-CPU platform: vLLM's CPU worker with the Ascend binding hook
  (:func:`use_ascend_cpu_worker`, before vLLM's CPU defaults would choose vLLM's own worker).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

# --- NPU platform: worker and scheduler -----------------------------------------------------------

# Worker entry points (group ``vllm_ascend.npu_runtime``) by kind, and the reference plugin's class
# each stands for (its ``_setup_worker_and_scheduler``; 310P wins over xlite).
WORKER_ENTRIES: dict[str, tuple[str, str]] = {
    "310p": ("worker_310p", "vllm_ascend._310p.worker_310p.NPUWorker310"),
    "xlite": ("worker_xlite", "vllm_ascend.xlite.xlite_worker.XliteWorker"),
    "npu": ("worker", "vllm_ascend.worker.worker.NPUWorker"),
}


def worker_kind(soc: str, xlite: bool) -> str:
    """Which worker the SoC and the xlite switch need: ``310p``, ``xlite`` or ``npu``."""
    if soc == "310P":
        return "310p"
    return "xlite" if xlite else "npu"


@dataclass(frozen=True)
class Selection:
    worker_cls: str
    scheduler_cls: str | None
    reason: str


def scheduler_policy(ascend_config: Any, kv_role: str | None) -> list[str]:
    """The scheduling policies the resolved config turns on (recompute only on decode nodes)."""
    sched = ascend_config.scheduler_config
    on = []
    if sched.recompute_scheduler_enable and kv_role == "kv_consumer":
        on.append("recompute")
    if sched.dyntra_lb_config.enabled:
        on.append("dyntra_lb")
    if sched.profiling_chunk_config.enabled:
        on.append("profiling_chunk")
    if sched.batch_job_sched_config.enabled:
        on.append("batch_job")
    if sched.short_request_first_config.enabled:
        on.append("short_request_first")
    return on


def scheduler_key(policies: list[str], async_scheduling: bool) -> str | None:
    """Entry-point name of the scheduler for the active policies (None = vLLM's default)."""
    if not policies:
        return None
    if set(policies) == {"recompute", "dyntra_lb"}:
        key = "dyntra_lb_recompute"
    elif len(policies) == 1:
        key = policies[0]
    else:
        raise ValueError(
            f"scheduling policies {policies} cannot be combined; enable one of them "
            "(recompute and dyntra_lb may be combined)"
        )
    if key == "profiling_chunk":  # no async variant
        return key
    return f"async_{key}" if async_scheduling else key


def select_worker_and_scheduler(
    *, worker_setting: str, soc: str, xlite: bool, ascend_config: Any, kv_role: str | None,
    async_scheduling: bool, runtime: Mapping[str, str], schedulers: Mapping[str, str],
) -> Selection:
    """One decision for both classes; a missing provider is an error naming what to install."""
    kind = worker_kind(soc, xlite)
    entry, reference = WORKER_ENTRIES[kind]
    if worker_setting != "auto":
        worker, why = worker_setting, "worker_cls set by the user"
    elif entry in runtime:
        worker, why = runtime[entry], f"{entry} for {soc}" + (" (xlite)" if xlite else "")
    else:
        label = {"310p": "the 310P worker", "xlite": "the Xlite worker (xlite_graph_config"
                 ".enabled)", "npu": "the NPU worker"}[kind]
        raise RuntimeError(
            f"no installed package provides {label}: install the Ascend runtime extension that "
            f"declares the entry point group 'vllm_ascend.npu_runtime' with name {entry!r} (the "
            f"reference plugin's {reference}), or set VLLM_ASCEND_DEVICE=cpu"
        )
    key = scheduler_key(scheduler_policy(ascend_config, kv_role), async_scheduling)
    if key is None:
        return Selection(worker, None, why)
    if key not in schedulers:
        raise RuntimeError(
            f"the Ascend config enables the {key!r} scheduler but no installed package "
            f"provides it (entry point group 'vllm_ascend.schedulers', name {key!r})"
        )
    return Selection(worker, schedulers[key], f"{why}; scheduler {key}")


# --- NPU platform: what this package's NPU runtime needs ------------------------------------------

V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def use_v1_model_runner(environ: MutableMapping[str, str] | None = None) -> None:
    """Set ``VLLM_USE_V2_MODEL_RUNNER=0`` for this process and the workers it starts; a user's
    request for runner v2 is one ValueError."""
    env = os.environ if environ is None else environ
    value = env.get(V2_RUNNER_ENV)
    if value is None or not value.strip():
        env[V2_RUNNER_ENV] = "0"
        return
    if value.strip().lower() in ("1", "true"):
        raise ValueError(
            f"{V2_RUNNER_ENV}={value}: the NPU runtime runs vLLM's V1 model runner only (model "
            f"runner v2 is made of Triton kernels); unset {V2_RUNNER_ENV} or set it to 0"
        )


def choose_graph_mode(vllm_config: Any) -> str | None:
    """The NPU runtime's graph mode: the user's choice where the runtime can run it, else the
    nearest it can. FULL graphs need no compilation; PIECEWISE ones are cut by vLLM's compile,
    so without compilation (mode NONE) a piecewise mode becomes FULL_DECODE_ONLY. vLLM's
    Triton JIT warm-up is off (its kernels are Triton's). Returns the note to log (once, in the
    process that builds the config), None when nothing was changed."""
    from vllm.config import CompilationMode, CUDAGraphMode

    model, cc = vllm_config.model_config, vllm_config.compilation_config
    vllm_config.kernel_config.enable_jit_warmup = False
    mode = cc.cudagraph_mode
    if model.enforce_eager or mode is None or mode == CUDAGraphMode.NONE:
        return None
    parallel = getattr(vllm_config, "parallel_config", None)
    ranks = int(getattr(parallel, "world_size", 1) or 1)
    # HCCL's all-reduce, all-gather, reduce-scatter and broadcast are device work a graph
    # holds (TP). Expert parallelism's all-to-all is not one of them; PP's stage-to-stage
    # send/recv runs between the graphs, but graphs with PP are not proven on this runtime.
    stages = int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
    if stages > 1:
        cc.cudagraph_mode = CUDAGraphMode.NONE
        return (f"NPU graphs: cudagraph_mode {mode.name} asked with {stages} pipeline stages; "
                "the NPU runtime has not proven graphs around the stages' send/recv, so this "
                "engine runs eagerly")
    if ranks > 1 and getattr(parallel, "enable_expert_parallel", False):
        cc.cudagraph_mode = CUDAGraphMode.NONE
        return (f"NPU graphs: cudagraph_mode {mode.name} asked with {ranks} ranks and expert "
                "parallelism, whose all-to-all the NPU runtime cannot capture in a graph, so "
                "this engine runs eagerly")
    if mode.requires_piecewise_compilation() and cc.mode != CompilationMode.VLLM_COMPILE:
        cc.cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY
        cc.splitting_ops = []
        return (f"NPU graphs: cudagraph_mode {mode.name} needs compilation (mode {cc.mode}); "
                "using FULL_DECODE_ONLY (full graphs of decode batches)")
    return f"NPU graphs: cudagraph_mode {mode.name}, compilation mode {cc.mode}"


# --- host-CPU platform ----------------------------------------------------------------------------

CPU_WORKER_CLS = "vllm_ascend.cpu_runtime.worker.AscendCPUWorker"


def use_ascend_cpu_worker(vllm_config: Any) -> None:
    """Run vLLM's CPU worker with the Ascend binding hook, unless the user chose a worker."""
    par = vllm_config.parallel_config
    if par.worker_cls == "auto":
        par.worker_cls = CPU_WORKER_CLS
