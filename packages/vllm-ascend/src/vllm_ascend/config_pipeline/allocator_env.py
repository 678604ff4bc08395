"""Step 6 (NPU platform): the NPU caching-allocator options (``PYTORCH_NPU_ALLOC_CONF``)."""

from __future__ import annotations

DEFAULT_ALLOC_CONF = "expandable_segments:True"
_USER_TUNED = ("expandable_segments", "max_split_size_mb", "garbage_collection_threshold")


def npu_alloc_conf(current: str | None, enable_sleep_mode: bool) -> str | None:
    """The allocator options to use: expandable segments unless the user tuned the allocator
    (or sleep mode is on, which needs the default segments); None = leave unset."""
    if enable_sleep_mode:
        return current
    value = current or DEFAULT_ALLOC_CONF
    if any(key in value for key in _USER_TUNED):
        return value
    return f"{value},{DEFAULT_ALLOC_CONF}"


def drop_expandable_segments(current: str | None) -> str | None:
    """Remove ``expandable_segments:...`` entries (exact prefix); unset stays unset."""
    if current is None:
        return None
    kept = [p for p in current.split(",") if p and not p.startswith("expandable_segments:")]
    return ",".join(kept)
