"""NPU platform, when this package's NPU runtime is the worker: vLLM's V1 model runner (model
runner v2 is built from Triton kernels the NPU path does not have; vLLM would pick it wherever
Triton imports), with NPU graphs unless the user asks for eager mode."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

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
    if ranks > 1:
        # vLLM's graph_capture accepts only CUDA/XPU communicators, and this runtime does not
        # yet capture collectives into its graphs: a multi-rank engine runs eagerly.
        cc.cudagraph_mode = CUDAGraphMode.NONE
        return (f"NPU graphs: cudagraph_mode {mode.name} asked with {ranks} ranks; the NPU "
                "runtime captures graphs of one rank only, so this engine runs eagerly")
    if mode.requires_piecewise_compilation() and cc.mode != CompilationMode.VLLM_COMPILE:
        cc.cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY
        cc.splitting_ops = []
        return (f"NPU graphs: cudagraph_mode {mode.name} needs compilation (mode {cc.mode}); "
                "using FULL_DECODE_ONLY (full graphs of decode batches)")
    return f"NPU graphs: cudagraph_mode {mode.name}, compilation mode {cc.mode}"
