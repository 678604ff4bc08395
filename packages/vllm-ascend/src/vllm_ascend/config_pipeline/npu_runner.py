"""NPU platform, when this package's NPU runtime is the worker: vLLM's V1 model runner (model
runner v2 is built from Triton kernels the NPU path does not have; vLLM would pick it wherever
Triton imports), run eagerly."""

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


def run_eagerly(vllm_config: Any) -> str | None:
    """The runtime has no graph capture and its compile path is not proven on an NPU yet: run
    the model eagerly (compilation mode NONE, no graphs, no Triton JIT warm-up). Returns the
    note to log, None when the user already asked for eager mode."""
    from vllm.config import CompilationMode, CUDAGraphMode

    model, cc = vllm_config.model_config, vllm_config.compilation_config
    vllm_config.kernel_config.enable_jit_warmup = False  # its kernels are Triton's
    if model.enforce_eager and cc.mode == CompilationMode.NONE:
        return None
    was = f"compilation mode {cc.mode}, cudagraph_mode {cc.cudagraph_mode.name}"
    model.enforce_eager = True
    cc.mode = CompilationMode.NONE
    cc.cudagraph_mode = CUDAGraphMode.NONE
    cc.cudagraph_capture_sizes = []
    cc.max_cudagraph_capture_size = 0
    return (f"the NPU runtime runs eagerly (no graph capture yet): {was} -> eager "
            "(as --enforce-eager)")
