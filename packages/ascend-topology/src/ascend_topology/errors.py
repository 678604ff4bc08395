"""The package's error types: every failure a caller can see is a ``TopologyError``."""

from __future__ import annotations


class TopologyError(RuntimeError):
    """Base of every error this package raises; its message is one actionable line."""


class ParseError(TopologyError):
    """A command output or recorded file could not be understood."""


class CommandError(TopologyError):
    """An external command (npu-smi, lscpu, ...) is missing, failed or timed out."""


class RecordedHostError(TopologyError):
    """A recorded-host folder is missing files or holds invalid values."""


class PlanError(TopologyError):
    """A plan was asked for something it cannot answer (e.g. a rank it has no NPU for)."""
