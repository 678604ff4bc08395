"""The owner of a process's Ascend state; it is handed its config and resolves none."""

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
    """What has been set up in this process (one per process; reset in tests)."""

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
        """Log ``message`` as a warning (on ``log``) the first time this process sees it."""
        self.log_once(message, log, logging.WARNING)

    def log_once(self, message: str, log: logging.Logger | None = None,
                 level: int = logging.WARNING) -> bool:
        """Log ``message`` at ``level`` once per process; True when logged now."""
        if message in self.warned:
            return False
        self.warned.add(message)
        (log or logger).log(level, "%s", message)
        return True

    def device_soc(self) -> str:
        """The SoC family of this process's NPU, detected once; ``UnsupportedSocError`` (not
        cached)."""
        if self.soc_detection is None:
            detection = detect_soc(lambda: torch_npu().npu.get_soc_version())
            for warning in detection.warnings:
                self.warn_once(warning)
            logger.info("Ascend SoC: %s", detection.describe())
            self.soc_detection = detection
        return self.soc_detection.soc

    def cross_check_soc(self, soc: str, npu_smi_soc: str) -> str | None:
        """One warning (returned) when npu-smi disagrees with ``soc``, which stays in force."""
        detection = self.soc_detection
        described = detection.describe() if detection is not None and detection.soc == soc \
            else None
        message = npu_smi_disagreement(soc, npu_smi_soc, described)
        if message is not None:
            self.warn_once(message)
        return message

    def adjust(self, soc: str, config: ConfigSource) -> list[str]:
        """Apply the compat adjustments for ``soc`` (idempotent; ``config`` for run-time needs)."""
        return apply_compat_adjustments(soc, config=config)

    def setup(self, ascend_config: AscendConfig, soc: str,
              config: ConfigSource = no_config) -> ProcessSetup:
        """Adjustments, file logging and batch invariance, once per resolved config."""
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
