"""Teacher-forced log-probabilities of a fixed text: an engine against a float32 reference.

The text runs as one prompt; at every position the model scores the text's actual next token.
Two numbers say how close an engine is to a reference (Hugging Face transformers in float32):
the mean absolute difference of the actual next token's log-probability, and the fraction of
positions whose most likely next token is the same. The engine side runs in the process that
holds the `vllm.LLM` (`vllm_ascend_testing.llm_worker`'s `prompt_logprobs` op); the reference
side in any process with transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TokenScores:
    """Per position ``i`` of a text (``i >= 1``): the log-probability the model gave the
    text's token ``i`` after tokens ``0..i-1``, and the token it found most likely there."""

    chosen: list[float]
    top1: list[int]

    def __post_init__(self) -> None:
        if len(self.chosen) != len(self.top1):
            raise ValueError(
                f"chosen has {len(self.chosen)} positions and top1 {len(self.top1)}; "
                "they must be equal")


@dataclass(frozen=True)
class Closeness:
    """How close an engine's scores are to a reference's over the same text."""

    mean_abs_delta: float  # mean over positions of |engine logprob - reference logprob|
    top1_agreement: float  # fraction of positions with the same most likely token
    positions: int


def compare(engine: TokenScores, reference: TokenScores) -> Closeness:
    """The closeness of ``engine`` to ``reference`` (scores of the same text)."""
    n = len(reference.chosen)
    if len(engine.chosen) != n or n == 0:
        raise ValueError(
            f"engine scored {len(engine.chosen)} positions and the reference {n}; "
            "both must score the same non-empty text")
    delta = sum(abs(a - b) for a, b in zip(engine.chosen, reference.chosen, strict=True))
    agree = sum(a == b for a, b in zip(engine.top1, reference.top1, strict=True))
    return Closeness(delta / n, agree / n, n)


def engine_scores(llm: Any, token_ids: Sequence[int]) -> TokenScores:
    """The scores of ``token_ids`` from a `vllm.LLM` (``prompt_logprobs=1``: vLLM returns the
    actual token's entry and the rank-1 entry at every prompt position after the first)."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
    prompt = TokensPrompt(prompt_token_ids=[int(t) for t in token_ids])
    (result,) = llm.generate([prompt], params, use_tqdm=False)
    steps = result.prompt_logprobs
    if steps is None or len(steps) != len(token_ids):
        raise RuntimeError("the engine returned no prompt log-probabilities for every position")
    chosen, top1 = [], []
    for token, step in zip(token_ids[1:], steps[1:], strict=True):
        chosen.append(float(step[int(token)].logprob))
        top1.append(next(t for t, entry in step.items() if entry.rank == 1))
    return TokenScores(chosen, top1)


def reference_scores(model_dir: str | Path, token_ids: Sequence[int]) -> TokenScores:
    """The scores of ``token_ids`` from transformers in float32 (eager attention), one
    forward pass over the whole text."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = torch.tensor([list(token_ids)], dtype=torch.long)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    chosen = logprobs.gather(-1, ids[0, 1:, None])[:, 0]
    return TokenScores([float(v) for v in chosen], [int(v) for v in logprobs.argmax(-1)])
