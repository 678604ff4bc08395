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
    "size instead of one per piece), or disable graph mode (enforce_eager=True). A 'no space "
    "left on device' in the original text is not about disk space."
)
_NOT_ALLOWED = (
    "NPU graph capture met an operation that cannot be captured (a host read such as .item() "
    "or .tolist(), a device-to-host copy, or an op whose output size depends on the data): the "
    "model or a custom op syncs with the host inside the captured forward. Move the host read "
    "out of the forward, use cudagraph_mode PIECEWISE (attention stays outside the graphs), or "
    "run without graphs (enforce_eager=True)."
)


def translate_capture_error(exc: BaseException) -> GraphCaptureError | None:
    """The actionable error for a known capture failure, or None for anything else."""
    message = str(exc).lower()
    if "alloc sq cq fail" in message:
        return GraphCaptureError(f"{_OLD_DRIVER} (original error: {exc})")
    stream_code = "207008" in message or "207005" in message
    insufficient = (
        "insufficient_stream_resources" in message
        or "stream resources are insufficient" in message
        or (stream_code and ("stream" in message or "no space left" in message))
    )
    if insufficient:
        return GraphCaptureError(f"{_STREAMS} (original error: {exc})")
    if "not allowed in capture" in message:
        return GraphCaptureError(f"{_NOT_ALLOWED} (original error: {exc})")
    return None
