"""Top-level keys the plugin accepted once and no longer does.

A retired key is an error that says when it went and what took over (never a did-you-mean
to an unrelated key): its option no longer exists, so silently ignoring it would leave the
user believing a feature is on. ``version`` is the first vllm-ascend release without the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RetiredKey:
    """One retired key: when it went and what replaced it (None: nothing, just remove it)."""

    name: str
    version: str
    replacement: str | None

    def message(self) -> str:
        """``'<key>' was retired in <version>: remove it`` and what replaced it, if anything."""
        text = f"'{self.name}' was retired in {self.version}: remove it"
        return f"{text} ({self.replacement})" if self.replacement else text

    def allowed(self) -> str:
        """The fix, for the problem's ``allowed`` part."""
        return "nothing: remove the key"


RETIRED: Mapping[str, RetiredKey] = {
    r.name: r for r in (
        RetiredKey("torchair_graph_config", "v0.12.0rc1",
                   "replaced by ACL graph mode, the default; see vLLM's "
                   "compilation_config.cudagraph_mode"),
        RetiredKey("ascend_scheduler_config", "v0.12.0rc1",
                   "replaced by vLLM's scheduler; --no-enable-chunked-prefill turns chunked "
                   "prefill off"),
        RetiredKey("expert_tensor_parallel_size", "v0.10.0rc1",
                   "replaced by vLLM's --enable-expert-parallel"),
        RetiredKey("enable_sleep_mode_extra_cleanup", "v0.26.0rc1",
                   "replaced by rl_config.sleep_mode_extra_cleanup"),
    )
}
