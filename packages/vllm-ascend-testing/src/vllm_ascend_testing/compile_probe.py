"""A vLLM logits processor that makes the engine compile a function after it is ready, on demand.

Load it with ``--logits-processors vllm_ascend_testing.compile_probe:CompileProbe`` (or
``logits_processors=[CompileProbe]``); a request with ``extra_args={"compile_probe": 1}``
(``vllm_xargs`` in the OpenAI API) makes its ``apply`` call a ``torch.compile`` function that
was never called before, like a user's logits processor compiling lazily. The function adds
zero, so the answers are those of stock sampling. Each processor instance compiles its own
function once; later probes reuse it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

PROBE_ARG = "compile_probe"


def _add_zero(logits: torch.Tensor) -> torch.Tensor:
    return logits + 0.0


class CompileProbe(LogitsProcessor):
    """Calls a compiled identity on the logits while a request of the batch asks for it."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.active: set[int] = set()
        self.compiled = torch.compile(_add_zero, backend="eager", dynamic=False)

    def is_argmax_invariant(self) -> bool:
        return False  # so vLLM applies it to greedy requests too

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.active.discard(index)
        for index, params, _, _ in batch_update.added:
            self.active.discard(index)
            if (getattr(params, "extra_args", None) or {}).get(PROBE_ARG):
                self.active.add(index)
        for first, second, direction in batch_update.moved:
            a, b = first in self.active, second in self.active
            self.active.discard(first)
            self.active.discard(second)
            if a:
                self.active.add(second)
            if b and direction == MoveDirectionality.SWAP:
                self.active.add(first)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return logits
        out: torch.Tensor = self.compiled(logits)
        return out
