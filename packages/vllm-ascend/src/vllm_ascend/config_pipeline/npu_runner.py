"""NPU platform: the runtime runs vLLM's V1 model runner (model runner v2 is built from Triton
kernels the NPU path does not have; vLLM would pick it wherever Triton imports)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

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
