"""The channel that hands the inputs of config resolution to spawned processes."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from ascend_config import envs

from vllm_ascend.base import worker_inputs

logger = logging.getLogger(__name__)

WORKER_INPUTS_ENV = "VLLM_ASCEND_WORKER_CONFIG_INPUTS"
"""The published resolution inputs (inline JSON, or the path of their private file)."""
RANK_PLAN_ENV = "VLLM_ASCEND_RANK_PLAN"
"""The host-CPU platform's per-rank plan (JSON: the plan and the OpenMP lists handed to vLLM)."""
OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's per-local-rank OpenMP CPU lists (``"0-3|4-7"``), in DP x PP x TP rank order."""


def ascend_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The set variables of ascend-config's env registry, minus the plugin's own output channels."""
    # Were WORKER_INPUTS_ENV included, each publication would hash in the previous path and equal
    # inputs would never share a file.
    env = os.environ if environ is None else environ
    outputs = (WORKER_INPUTS_ENV, RANK_PLAN_ENV)
    return {name: env[name] for name in envs.names() if name in env and name not in outputs}


def publish_worker_inputs(
    soc: str,
    additional_config: Mapping[str, Any],
    facts: Any,
    resolve_environ: Mapping[str, str],
    environ: MutableMapping[str, str] | None = None,
) -> bool:
    """Publish the resolution inputs to child processes; False (one warning) when it cannot."""
    env = os.environ if environ is None else environ
    try:
        data = worker_inputs.encode_inputs(
            {"soc": soc, "additional_config": dict(additional_config), "facts": facts.to_dict(),
             "environ": dict(resolve_environ)})
    except (TypeError, ValueError) as exc:
        env.pop(WORKER_INPUTS_ENV, None)
        logger.warning("workers will use defaults: additional_config is not "
                       "JSON-serialisable (%s)", exc)
        return False
    try:
        env[WORKER_INPUTS_ENV] = worker_inputs.env_value(data)
    except (OSError, worker_inputs.WorkerInputsError) as exc:
        env.pop(WORKER_INPUTS_ENV, None)
        logger.warning("workers will use defaults: cannot write the worker inputs (%s)", exc)
        return False
    return True


def published_inputs(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The inputs published for this process, or None; WorkerInputsError/OSError when unusable."""
    env = os.environ if environ is None else environ
    value = env.get(WORKER_INPUTS_ENV)
    return worker_inputs.inputs_from_env(value) if value else None


def published_soc(environ: Mapping[str, str] | None = None) -> str | None:
    """The SoC the config-creating process published for its children, or None."""
    try:
        inputs = published_inputs(environ)
    except (OSError, ValueError):
        return None
    return None if inputs is None else inputs["soc"]
