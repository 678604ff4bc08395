"""Known NPU graph-capture failures, turned into errors that say what to change."""

from __future__ import annotations


class GraphCaptureError(RuntimeError):
    """A device-graph capture failed for a known reason; the message names the remedy."""


class GraphInputMismatchError(RuntimeError):
    """Debug mode: a replay got inputs at other addresses than the capture (stale results)."""


_OLD_DRIVER = (
    "NPU graph capture failed with 'alloc sq cq fail': the installed Ascend HDK/CANN is too old "
    "for graph capture. Upgrade the HDK to 25.5.1 or later, or run without graphs "
    "(enforce_eager=True)."
)
_STREAMS = (
    "NPU graph capture ran out of stream resources (error 207008): every captured graph holds "
    "device streams. Capture fewer or smaller sizes (compilation_config.cudagraph_capture_sizes "
    "/ max_cudagraph_capture_size), use cudagraph_mode FULL or FULL_DECODE_ONLY (one graph per "
    "size instead of one per piece), or disable graph mode (enforce_eager=True)."
)


def translate_capture_error(exc: BaseException) -> GraphCaptureError | None:
    """The actionable error for a known capture failure, or None for anything else."""
    message = str(exc).lower()
    if "alloc sq cq fail" in message:
        return GraphCaptureError(f"{_OLD_DRIVER} (original error: {exc})")
    insufficient = (
        "insufficient_stream_resources" in message
        or "stream resources are insufficient" in message
        or ("207008" in message and "stream" in message)
    )
    if insufficient:
        return GraphCaptureError(f"{_STREAMS} (original error: {exc})")
    return None
