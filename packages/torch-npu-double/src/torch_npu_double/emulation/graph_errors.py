"""What an emulated graph capture or replay can fail with: the errors the device reports."""

from __future__ import annotations

#: What the real runtime reports for each injectable capture failure (``fail_next_capture``).
CAPTURE_FAILURES = {
    "streams": ("EZ9999: Inner Error! rtStreamCreate failed, error code 207008: stream "
                "resources are insufficient. [ERROR] no space left on device"),
    "old_driver": "EE9999: Inner Error! capture_begin: alloc sq cq fail",
    "not_allowed": ("ACL graph capture failed: operation not allowed in capture "
                    "(aclmdlRICaptureBegin status 107027)"),
}


class GraphCaptureNotAllowed(RuntimeError):
    """An operation the device cannot put into a graph ran during capture."""


class GraphReplayError(RuntimeError):
    """A replay or task update the device would reject (or that would corrupt memory)."""
