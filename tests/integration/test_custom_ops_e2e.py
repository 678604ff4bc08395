"""The Ascend CustomOps in compiled tiny models on the host-CPU platform.

For each model (llama with Llama 3 rope scaling, Qwen3 with YaRN), one engine
runs with the Ascend CustomOps (the default) and one with every Ascend CustomOp switched off by
vLLM's own ``custom_ops`` directives (vLLM's native rope and SwiGLU). The two engines of a
comparison compile at once, each in its own worker with a fresh compile cache and its own graph
dump. The Ascend engine's graphs must hold one ``ascend.rotary_embedding`` (or, where the
architecture has a q/k norm, one fused ``ascend.split_qkv_rmsnorm_rope``) and one
``ascend.silu_and_mul`` per decoder layer; the native engine's none; greedy tokens must agree.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.checkpoints.tiny_models import make_tiny_model
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.graph_dump import count_ops_in_dump, inductor_debug_env

NUM_LAYERS = 2
PROMPTS = ("Hello, my name is", "The capital of France is", "Once upon a time")
MAX_TOKENS = 10
ROPE = "ascend.rotary_embedding"
FUSED = "ascend.split_qkv_rmsnorm_rope"
SILU = "ascend.silu_and_mul"
OPS = (ROPE, FUSED, SILU)

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
# name -> (arch, rope_scaling, rope nodes, fused q/k-norm + rope nodes) of the Ascend engine.
MODELS: dict[str, tuple[str, dict[str, Any], int, int]] = {
    "llama-llama3": ("llama", LLAMA3, NUM_LAYERS, 0),  # llama has no q/k norm
    "qwen3-yarn": ("qwen3", YARN, 0, NUM_LAYERS),  # every rope follows a q/k norm
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


@dataclass
class Run:
    outputs: list[dict[str, Any]]
    report: dict[str, int]
    ops: dict[str, int]


class Comparisons:
    """Per model: the Ascend-CustomOp engine and the native one, built once, two at a time."""

    def __init__(self, start: Callable[..., Any], root: Path, log_dir: str) -> None:
        self.start, self.root, self.log_dir = start, root, log_dir
        self.runs: dict[str, dict[str, Run]] = {}

    def get(self, name: str) -> dict[str, Run]:
        if name not in self.runs:
            arch, rope_scaling, _, _ = MODELS[name]
            model = make_tiny_model(arch, self.root / name, layers=NUM_LAYERS,
                                    rope_scaling=rope_scaling)
            settings = {"ascend": False, "native": True}
            dumps = {s: self.root / f"{name}-{s}-dump" for s in settings}
            workers = {s: self.start(f"{name}-{s}", device="cpu", **inductor_debug_env(dumps[s]))
                       for s in settings}

            def drive(setting: str) -> Run:
                worker = workers[setting]
                kwargs = llm_kwargs(str(model), log_dir=self.log_dir)
                worker.request("load", name=setting, kwargs=kwargs,
                               native_custom_ops=settings[setting], timeout=1500)
                answer = worker.request("generate", name=setting, prompts=list(PROMPTS),
                                        max_tokens=MAX_TOKENS, timeout=900)
                report = worker.request("fusion_report")["report"]
                worker.close()
                return Run(answer["outputs"], report, count_ops_in_dump(dumps[setting], OPS))

            with ThreadPoolExecutor(max_workers=2) as pool:
                self.runs[name] = dict(zip(settings, pool.map(drive, settings), strict=True))
        return self.runs[name]


@pytest.fixture(scope="module")
def comparisons(start_worker: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory,
                ascend_log_dir: str) -> Comparisons:
    return Comparisons(start_worker, tmp_path_factory.mktemp("custom_ops_e2e"), ascend_log_dir)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_graphs_hold_the_ascend_ops_and_the_fusion(comparisons: Comparisons, name: str) -> None:
    _, _, rope, fused = MODELS[name]
    runs = comparisons.get(name)
    assert runs["ascend"].ops == {ROPE: rope, FUSED: fused, SILU: NUM_LAYERS}
    assert runs["ascend"].report.get("qknorm_rope", 0) == fused
    assert runs["native"].ops == {ROPE: 0, FUSED: 0, SILU: 0}
    assert runs["native"].report.get("qknorm_rope", 0) == 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ascend_and_native_custom_ops_generate_identical_tokens(comparisons: Comparisons,
                                                                name: str) -> None:
    runs = comparisons.get(name)
    ascend = [o["token_ids"] for o in runs["ascend"].outputs]
    assert all(len(tokens) == MAX_TOKENS for tokens in ascend)
    assert ascend == [o["token_ids"] for o in runs["native"].outputs]


def test_tiny_model_factory_writes_and_checks_rope_scaling(tmp_path: Path) -> None:
    import json

    path = make_tiny_model("llama", tmp_path / "m", layers=1, hidden=64, heads=2, kv_heads=1,
                           head_dim=32, rope_scaling=YARN)
    config = json.loads((path / "config.json").read_text())
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    assert scaling["rope_type"] == "yarn" and scaling["factor"] == 4.0
    with pytest.raises(ValueError, match="needs a rope_type of: llama3, yarn"):
        make_tiny_model("llama", tmp_path / "x", rope_scaling={"rope_type": "su"})
    with pytest.raises(ValueError, match="misses low_freq_factor"):
        make_tiny_model("llama", tmp_path / "y", rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 256})
