"""Warm-up of what vLLM's sampler compiles on first use, so no API feature compiles after ready."""
# vLLM's own warm-up never asks for logprobs, whose batched_count_greater_than is compiled on first
# use: it is called here as the sampler calls it (float32, unbacked batch dimension).

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def warm_up_sampler(model_runner: Any) -> bool:
    """Run the sampler's logprobs path once; False for a runner without vLLM's sampler."""
    import torch

    sampler: Any = getattr(model_runner, "sampler", None)
    gather = getattr(sampler, "gather_logprobs", None)
    model_config = getattr(model_runner, "model_config", None)
    if gather is None or model_config is None or getattr(model_config, "runner_type",
                                                          "generate") != "generate":
        return False
    vocab = int(model_config.get_vocab_size())
    device = getattr(model_runner, "device", torch.device("cpu"))
    with torch.inference_mode():
        for batch in (1, 2):  # the batch dimension is unbacked: both sizes hit one compile
            logits = torch.randn(batch, vocab, dtype=torch.float32, device=device)
            logprobs = sampler.compute_logprobs(logits)
            sampled = torch.zeros(batch, dtype=torch.int64, device=device)
            gather(logprobs, 1, token_ids=sampled)
    logger.debug("sampler logprobs path warmed up (vocabulary %d)", vocab)
    return True
