"""Per-process setup of an Ascend vLLM process: adjustments, file logging, batch invariance.

It runs in every process (API server, engine core, workers) and knows no rank, so it binds no
CPU: a worker binds itself where its rank is known (``runtime.cpu_binding.bind_this_worker``)
and records the result in ``ProcessSetup.cpu_binding``.

The engine-side platform resolves the Ascend config and publishes the *inputs* of that
resolution (additional_config, deployment facts, the Ascend environment variables as they
were before any env change was applied) in a private file whose path is in one environment
variable that spawned workers inherit (``runtime.worker_inputs``); each worker calls
ascend-config's pure ``resolve`` with the same inputs, so every process holds an equal config
and vLLM's ``additional_config`` is never written to.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_ascend.runtime.trusted_paths import TrustedRoots

if TYPE_CHECKING:
    from vllm_ascend.platform.soc import SocDetection

logger = logging.getLogger("vllm_ascend.runtime.process_setup")

WORKER_INPUTS_ENV = "VLLM_ASCEND_WORKER_CONFIG_INPUTS"


def ascend_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ascend-config's env registry that are set (the env input of resolve).

    :data:`WORKER_INPUTS_ENV` and the host-CPU rank plan are left out: they are the plugin's
    output channels, not inputs of the resolution. Were the first included, every publication
    would hash in the path of the one before it, so equal inputs would never share a file.
    """
    from ascend_config import envs

    from vllm_ascend.runtime.cpu_binding import RANK_PLAN_ENV

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
    """Store the resolution inputs (additional_config, facts, the Ascend env variables) for
    child processes: in a private file whose path goes into ``environ`` (not the inputs
    themselves, see ``runtime.worker_inputs``). False, with one warning, when additional_config
    is not JSON-serialisable or the file cannot be written; the variable is then removed, so
    children never read an earlier publication."""
    from vllm_ascend.runtime import worker_inputs

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
    """The inputs published for this process (soc, additional_config, facts, environ), or
    None when none were; ``WorkerInputsError``/``OSError`` when the file cannot be used."""
    from vllm_ascend.runtime.worker_inputs import inputs_from_env

    env = os.environ if environ is None else environ
    value = env.get(WORKER_INPUTS_ENV)
    return inputs_from_env(value) if value else None


def published_soc(environ: Mapping[str, str] | None = None) -> str | None:
    """The SoC the config-creating process published for its children, or None."""
    try:
        inputs = published_inputs(environ)
    except (OSError, ValueError):
        return None
    return None if inputs is None else inputs["soc"]


def resolve_published(environ: Mapping[str, str] | None = None) -> tuple[str, Any] | None:
    """(soc, resolved AscendConfig) from the published inputs, or None when none were published."""
    data = published_inputs(environ)
    if data is None:
        return None
    import ascend_config

    facts = ascend_config.DeploymentFacts.from_mapping(data["facts"])
    return data["soc"], ascend_config.resolve(
        data["additional_config"], facts=facts, environ=data["environ"]
    )


@dataclass
class ProcessSetup:
    """What has been set up in this process (one instance per process; reset in tests).

    ``cpu_binding`` holds the report lines of this worker's binding (empty in processes that
    are not workers: they are never bound). ``soc_detection`` is the NPU's SoC, detected from
    the device on first need (:meth:`device_soc`); ``warned`` the log-once keys; ``roots`` the
    cache and log roots checked in this process (``runtime.trusted_paths``).
    """

    adjustments: list[str] = field(default_factory=list)
    log_dir: str | None = None
    batch_invariance: Any = None
    cpu_binding: list[str] = field(default_factory=list)
    done_for: str | None = None
    soc_detection: SocDetection | None = None
    warned: set[str] = field(default_factory=set)
    roots: TrustedRoots = field(default_factory=TrustedRoots)

    def warn_once(self, message: str, log: logging.Logger | None = None) -> None:
        """Log ``message`` as a warning (on ``log``, default this module's logger) the first
        time this process sees it."""
        if message not in self.warned:
            self.warned.add(message)
            (log or logger).warning("%s", message)

    def device_soc(self) -> str:
        """The SoC family of this process's NPU, detected once from
        ``torch_npu.npu.get_soc_version()`` (``platform.soc`` says what each id means).

        ``UnsupportedSocError`` when the id names no supported SoC; nothing is cached then.
        """
        if self.soc_detection is None:
            from vllm_ascend.platform.npu_device import torch_npu
            from vllm_ascend.platform.soc import detect_soc

            detection = detect_soc(lambda: torch_npu().npu.get_soc_version())
            for warning in detection.warnings:
                self.warn_once(warning)
            logger.info("Ascend SoC: %s", detection.describe())
            self.soc_detection = detection
        return self.soc_detection.soc

    def cross_check_soc(self, soc: str, npu_smi_soc: str) -> str | None:
        """Compare npu-smi's reading of the chips with the SoC in force (``soc``); a
        disagreement is one warning naming both (also returned). ``soc`` stays in force."""
        from vllm_ascend.platform.soc import npu_smi_disagreement

        detection = self.soc_detection
        described = detection.describe() if detection is not None and detection.soc == soc \
            else None
        message = npu_smi_disagreement(soc, npu_smi_soc, described)
        if message is not None:
            self.warn_once(message)
        return message

    def setup(self, ascend_config: Any, soc: str) -> ProcessSetup:
        """Idempotent per resolved config: adjustments, file logging, batch invariance."""
        from vllm_ascend.observability import logging_setup
        from vllm_ascend.platform.compat_adjustments import apply_compat_adjustments
        from vllm_ascend.runtime import batch_invariance

        key = f"{soc}:{ascend_config.to_json()}"
        if self.done_for == key:
            return self
        self.done_for = key
        self.adjustments = apply_compat_adjustments(soc)
        logging_setup.configure_console_logging()
        log_dir = os.path.expanduser(str(ascend_config.ascend_log_path))
        handler = logging_setup.configure_file_logging(log_dir)
        self.log_dir = str(handler.log_dir) if handler is not None else None
        self.batch_invariance = batch_invariance.init_batch_invariance(ascend_config)
        return self


_PROCESS = ProcessSetup()


def current_process_setup() -> ProcessSetup:
    return _PROCESS


def reset_process_setup() -> None:
    """Forget this process's setup (tests)."""
    global _PROCESS
    _PROCESS = ProcessSetup()
