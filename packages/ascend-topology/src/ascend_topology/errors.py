"""The package's error types: every failure a caller can see is a ``TopologyError``."""

from __future__ import annotations


class TopologyError(RuntimeError):
    """Base of every error this package raises.

    Each problem is one actionable line; an error may carry several (``problems``), e.g. every
    invalid value of one ``host.json``. ``str(error)`` joins them with ``"; "``.
    """

    def __init__(self, problem: str, *more: str) -> None:
        super().__init__(problem, *more)
        self.problems: tuple[str, ...] = (problem, *more)

    def __str__(self) -> str:
        return "; ".join(self.problems)


class ParseError(TopologyError):
    """A command output or recorded file could not be understood."""


class CommandError(TopologyError):
    """An external command (npu-smi, lscpu, ...) is missing, failed or timed out."""


class RecordedHostError(TopologyError):
    """A recorded-host folder is missing files, holds unsafe files or invalid values."""


class PlanError(TopologyError):
    """A plan was asked for something it cannot answer (e.g. a rank it has no NPU for)."""
