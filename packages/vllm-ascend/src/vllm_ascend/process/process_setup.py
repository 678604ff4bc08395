"""The owner of a process's Ascend state: adjustments to vLLM, file logging, batch
invariance, the device SoC and log-once keys. It resolves no config: it is handed one
(``setup``) by the config pipeline or by the plugin hooks, which take it from the engine
registry (``engine.registry``). What belongs to one engine is on its ``AscendEngine``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vllm_ascend.base.npu_device import torch_npu
from vllm_ascend.base.soc import SocDetection, detect_soc, npu_smi_disagreement
from vllm_ascend.base.trusted_roots import TrustedRoots
from vllm_ascend.observability import logging_setup
from vllm_ascend.process import batch_invariance
from vllm_ascend.process.compat_adjustments import ConfigSource, apply_compat_adjustments

if TYPE_CHECKING:
    from ascend_config import AscendConfig

    from vllm_ascend.process.batch_invariance import BatchInvarianceReport

logger = logging.getLogger(__name__)


def no_config() -> None:
    """A config source for a process that was published none."""
    return None


@dataclass
class ProcessSetup:
    """What has been set up in this process (one instance per process; reset in tests).

    ``cpu_binding`` holds the report lines of this worker's binding (empty in processes that
    are not workers: they are never bound). ``soc_detection`` is the NPU's SoC, detected from
    the device on first need (:meth:`device_soc`); ``warned`` the log-once keys; ``roots`` the
    cache and log roots checked in this process (``base.trusted_paths``); ``hooks_run`` the
    vLLM plugin hooks that ran. What belongs to one engine lives on its ``AscendEngine``.
    """

    adjustments: list[str] = field(default_factory=list)
    log_dir: str | None = None
    batch_invariance: BatchInvarianceReport | None = None
    cpu_binding: list[str] = field(default_factory=list)
    done_for: str | None = None
    soc_detection: SocDetection | None = None
    warned: set[str] = field(default_factory=set)
    roots: TrustedRoots = field(default_factory=TrustedRoots)
    hooks_run: set[str] = field(default_factory=set)

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
        ``torch_npu.npu.get_soc_version()`` (``base.soc`` says what each id means).

        ``UnsupportedSocError`` when the id names no supported SoC; nothing is cached then.
        """
        if self.soc_detection is None:
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

    def adjust(self, soc: str, config: ConfigSource) -> list[str]:
        """Apply the compat adjustments for ``soc`` (idempotent); ``config`` gives the config
        published to the process when an adjustment needs it at run time (the batch-invariance
        handover, when vLLM's worker runs it)."""
        return apply_compat_adjustments(soc, config=config)

    def setup(self, ascend_config: AscendConfig, soc: str,
              config: ConfigSource = no_config) -> ProcessSetup:
        """Idempotent per resolved config: adjustments (``config`` as in :meth:`adjust`), file
        logging, batch invariance."""
        key = f"{soc}:{ascend_config.to_json()}"
        if self.done_for == key:
            return self
        self.done_for = key
        self.adjustments = self.adjust(soc, config)
        logging_setup.configure_console_logging()
        log_dir = str(ascend_config.ascend_log_path)  # ``~`` expanded by the root rule
        handler = logging_setup.configure_file_logging(log_dir, roots=self.roots)
        self.log_dir = str(handler.log_dir) if handler is not None else None
        self.batch_invariance = batch_invariance.init_batch_invariance(ascend_config)
        return self


_PROCESS = ProcessSetup()


def current_process_setup() -> ProcessSetup:
    """This process's :class:`ProcessSetup`."""
    return _PROCESS


def reset_process_setup() -> None:
    """Forget this process's setup (tests: a fresh process)."""
    global _PROCESS
    _PROCESS = ProcessSetup()
