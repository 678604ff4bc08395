"""The owner of a process's Ascend state: adjustments, file logging, batch invariance, the
config published to this process (resolved once), the device SoC, log-once keys.

It runs in every process (API server, engine core, workers) and knows no rank, so it binds no
CPU: a worker binds itself where its rank is known (``runtime.worker_setup.prepare_worker``)
and records the result in ``ProcessSetup.cpu_binding``. It is the top of ``runtime``: the
modules below it (``config_channel``, ``cpu_binding``, ``batch_invariance``,
``platform.compat_adjustments``) get what they need from it as arguments and never import it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from vllm_ascend.observability import logging_setup
from vllm_ascend.platform.compat_adjustments import apply_compat_adjustments
from vllm_ascend.platform.soc import SocDetection, detect_soc, npu_smi_disagreement
from vllm_ascend.runtime import batch_invariance
from vllm_ascend.runtime.config_channel import WORKER_INPUTS_ENV, resolve_published
from vllm_ascend.runtime.per_config import PerConfig
from vllm_ascend.runtime.trusted_paths import TrustedRoots

logger = logging.getLogger("vllm_ascend.runtime.process_setup")

S = TypeVar("S")

@dataclass
class ProcessSetup:
    """What has been set up in this process (one instance per process; reset in tests).

    ``cpu_binding`` holds the report lines of this worker's binding (empty in processes that
    are not workers: they are never bound). ``soc_detection`` is the NPU's SoC, detected from
    the device on first need (:meth:`device_soc`); ``warned`` the log-once keys; ``roots`` the
    cache and log roots checked in this process (``runtime.trusted_paths``); ``states`` the
    per-process stores of other modules (:meth:`state`), so that a reset drops them too.
    """

    adjustments: list[str] = field(default_factory=list)
    log_dir: str | None = None
    batch_invariance: Any = None
    cpu_binding: list[str] = field(default_factory=list)
    done_for: str | None = None
    soc_detection: SocDetection | None = None
    warned: set[str] = field(default_factory=set)
    roots: TrustedRoots = field(default_factory=TrustedRoots)
    engine_configs: PerConfig[Any] = field(default_factory=PerConfig, repr=False)
    states: dict[type, Any] = field(default_factory=dict, repr=False)
    _published: tuple[str, tuple[str, Any] | None] | None = field(default=None, repr=False)

    def state(self, kind: type[S]) -> S:
        """This process's one ``kind`` (made by ``kind()`` on first use): the per-engine and
        once-per-process stores of the modules that need one live here, not at module level."""
        found = self.states.get(kind)
        if found is None:
            found = self.states[kind] = kind()
        return cast(S, found)

    def warn_once(self, message: str, log: logging.Logger | None = None) -> None:
        """Log ``message`` as a warning (on ``log``, default this module's logger) the first
        time this process sees it."""
        self.log_once(message, log, logging.WARNING)

    def log_once(self, message: str, log: logging.Logger | None = None,
                 level: int = logging.WARNING) -> bool:
        """Log ``message`` at ``level`` the first time this process sees it (any level: the
        log-once keys are the messages); True when it was logged now."""
        if message in self.warned:
            return False
        self.warned.add(message)
        (log or logger).log(level, "%s", message)
        return True

    def device_soc(self) -> str:
        """The SoC family of this process's NPU, detected once from
        ``torch_npu.npu.get_soc_version()`` (``platform.soc`` says what each id means).

        ``UnsupportedSocError`` when the id names no supported SoC; nothing is cached then.
        """
        if self.soc_detection is None:
            from vllm_ascend.platform.npu_device import torch_npu

            detection = detect_soc(lambda: torch_npu().npu.get_soc_version())
            for warning in detection.warnings:
                self.warn_once(warning)
            logger.info("Ascend SoC: %s", detection.describe())
            self.soc_detection = detection
        return self.soc_detection.soc

    def cross_check_soc(self, soc: str, npu_smi_soc: str) -> str | None:
        """Compare npu-smi's reading of the chips with the SoC in force (``soc``); a
        disagreement is one warning naming both (also returned). ``soc`` stays in force."""
        detection = self.soc_detection
        described = detection.describe() if detection is not None and detection.soc == soc \
            else None
        message = npu_smi_disagreement(soc, npu_smi_soc, described)
        if message is not None:
            self.warn_once(message)
        return message

    def published_config(
            self, environ: Mapping[str, str] | None = None) -> tuple[str, Any] | None:
        """(soc, resolved AscendConfig) published to this process, or None when none was.

        Resolved once per publication (the channel's value names its inputs by content), not
        once per call; a channel that cannot be read raises each time (``WorkerInputsError``,
        ``OSError``, ``AscendConfigError``) and is not remembered."""
        env = os.environ if environ is None else environ
        value = env.get(WORKER_INPUTS_ENV)
        if not value:
            return None
        if self._published is None or self._published[0] != value:
            self._published = (value, resolve_published(env))
        return self._published[1]

    def config_for(self, vllm_config: Any) -> Any:
        """The resolved AscendConfig of the engine that owns ``vllm_config``: the one this
        process resolved for that very config object (an engine created here), else the one
        published to this process (a worker: its VllmConfig is a copy), else None."""
        resolved = self.engine_configs.get(vllm_config)
        return resolved if resolved is not None else self.published_ascend_config()

    def published_ascend_config(self) -> Any:
        """The resolved AscendConfig published to this process (``os.environ``), or None."""
        published = self.published_config()
        return None if published is None else published[1]

    def adjust(self, soc: str) -> list[str]:
        """Apply the compat adjustments for ``soc`` (idempotent); the batch-invariance handover
        reads the config published to whichever ``ProcessSetup`` is current when it runs."""
        return apply_compat_adjustments(soc, config=current_ascend_config)

    def setup(self, ascend_config: Any, soc: str, vllm_config: Any = None) -> ProcessSetup:
        """Idempotent per resolved config: adjustments, file logging, batch invariance.
        With ``vllm_config`` (the engine's platform hook), ``ascend_config`` is remembered as
        that engine's (:meth:`config_for`)."""
        if vllm_config is not None:
            self.engine_configs.set(vllm_config, ascend_config)
        key = f"{soc}:{ascend_config.to_json()}"
        if self.done_for == key:
            return self
        self.done_for = key
        self.adjustments = self.adjust(soc)
        logging_setup.configure_console_logging()
        log_dir = os.path.expanduser(str(ascend_config.ascend_log_path))
        handler = logging_setup.configure_file_logging(log_dir, roots=self.roots)
        self.log_dir = str(handler.log_dir) if handler is not None else None
        self.batch_invariance = batch_invariance.init_batch_invariance(ascend_config)
        return self


_PROCESS = ProcessSetup()


def current_process_setup() -> ProcessSetup:
    """This process's :class:`ProcessSetup`."""
    return _PROCESS


def current_ascend_config() -> Any:
    """The resolved AscendConfig published to this process (resolved once), or None."""
    return _PROCESS.published_ascend_config()


def reset_process_setup() -> None:
    """Forget this process's setup and every store it holds (tests: the one reset); a store
    with a ``close`` method (one that registered callbacks elsewhere) is closed first."""
    global _PROCESS
    for store in _PROCESS.states.values():
        close = getattr(store, "close", None)
        if callable(close):
            close()
    _PROCESS = ProcessSetup()
