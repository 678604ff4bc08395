"""The memory-bound ceiling of single-stream decoding: weight bytes per step over bandwidth.

A single-stream decode step reads every weight matrix once (at batch 1 no weight is reused
across tokens), so a host that moves ``B`` bytes/s cannot decode faster than ``B / W`` tokens/s
for ``W`` bytes of weights read per step. ``W`` comes from the checkpoint's parameter shapes (the
safetensors headers; no tensor is loaded) in the run's dtype. The input embedding is a row
gather (one row per token, negligible), so it is not counted, except that tied embeddings are
the lm_head, which reads the whole matrix: they count once, as the lm_head. KV-cache reads and
activations are left out, so the ceiling is an upper bound.
"""

from __future__ import annotations

import json
import statistics
import struct
import time
from dataclasses import dataclass
from pathlib import Path

EMBEDDING = "embed_tokens.weight"
LM_HEAD = "lm_head.weight"


def tensor_elements(model_dir: Path) -> dict[str, int]:
    """Element count per tensor over the ``*.safetensors`` files of ``model_dir`` (headers
    only)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir} holds no *.safetensors file (a Hugging Face "
                                "checkpoint directory is needed)")
    counts: dict[str, int] = {}
    for path in files:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            elements = 1
            for dim in info["shape"]:
                elements *= int(dim)
            counts[name] = elements
    return counts


def weight_bytes_per_step(counts: dict[str, int], dtype_bytes: int, tied: bool) -> int:
    """Bytes of weights one decode step reads, every tensor once in a ``dtype_bytes`` dtype:
    ``tied``, the embedding counts as the lm_head (a stored lm_head copy is not read again);
    untied, the lm_head counts and the embedding (a row gather) does not."""
    if dtype_bytes <= 0:
        raise ValueError(f"dtype_bytes={dtype_bytes} must be positive")
    skipped = LM_HEAD if tied else EMBEDDING
    needed = EMBEDDING if tied else LM_HEAD
    if not any(name.endswith(needed) for name in counts):
        raise ValueError(f"{'tied' if tied else 'untied'} embeddings but the checkpoint holds "
                         f"no {needed}")
    return dtype_bytes * sum(n for name, n in counts.items() if not name.endswith(skipped))


def checkpoint_weight_bytes(model_dir: Path, dtype_bytes: int) -> int:
    """``weight_bytes_per_step`` of the checkpoint in ``model_dir``: tied when its config says
    so or when it holds no ``lm_head.weight``."""
    counts = tensor_elements(model_dir)
    config = json.loads((Path(model_dir) / "config.json").read_text())
    has_head = any(name.endswith(LM_HEAD) for name in counts)
    tied = bool(config.get("tie_word_embeddings", False)) or not has_head
    return weight_bytes_per_step(counts, dtype_bytes, tied=tied)


@dataclass
class Bandwidth:
    """Read-bandwidth samples (bytes/s) taken during one benchmark run."""

    samples: list[float]

    def median(self) -> float:
        return statistics.median(self.samples)

    def quartiles(self) -> tuple[float, float]:
        if len(self.samples) < 2:
            return self.samples[0], self.samples[0]
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q1, q3


def read_bandwidth(mib: int = 512, repeats: int = 5) -> list[float]:
    """Bytes/s of ``torch.sum`` over a ``mib`` MiB float32 tensor (far past the last-level
    cache), once per repeat, on torch's default threads: the rate a step's weight reads get."""
    import torch

    data = torch.ones(mib * 1024 * 1024 // 4, dtype=torch.float32)  # pages touched here
    data.sum()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        rates.append(data.nbytes / (time.perf_counter() - start))
    del data
    return rates


def ceiling_tokens_per_s(bandwidth: float, weight_bytes: int) -> float:
    """Single-stream tokens/s limit: bytes/s over bytes read per step."""
    if weight_bytes <= 0:
        raise ValueError(f"weight_bytes={weight_bytes} must be positive")
    return bandwidth / weight_bytes
