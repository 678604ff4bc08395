"""Every decode batch replays a captured graph, over the config-time capture-size rules.

The sweep drives the real path: the NPU platform's defaults hook (Ascend's default max),
vLLM's own ``VllmConfig._set_cudagraph_sizes`` (its grid: 1, 2, 4, multiples of 8 below 256,
multiples of 16 from 256), then ``setup_compile_backend`` (SP alignment, A5 pruning) on a
real ``CompilationConfig``. Only the configs it reads around that are small stand-ins.

"Largest decode batch": ``max_num_seqs * (1 + num_speculative_tokens)`` tokens, capped by the
default capture ceiling (512) and the scheduler's token budget; a wider step runs eagerly by
design, as does anything above a max the user set. vLLM pads a batch up to the next captured
size and runs one above ``max_cudagraph_capture_size`` eagerly, so "captured" means some size
is >= the batch. Bound on the number of sizes: 4 on A5, otherwise vLLM's grid up to 512
(3 + 31 + 17 = 51) plus the token budget and the decode batch, 53.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from vllm_ascend.config_pipeline import compile_settings as cs
from vllm_ascend.process.process_setup import reset_process_setup

GRID_BOUND = 3 + len(range(8, 256, 8)) + len(range(256, 513, 16)) + 2


@dataclass
class _Par:
    tensor_parallel_size: int = 1
    use_sequence_parallel_moe: bool = False
    all2all_backend: str = "allgather_reducescatter"
    data_parallel_size: int = 1


@dataclass
class _Sched:
    max_num_seqs: int
    max_num_batched_tokens: int


@dataclass
class _Spec:
    num_speculative_tokens: int


@dataclass
class _Model:
    enforce_eager: bool = False
    is_encoder_decoder: bool = False


@dataclass
class _Config:
    """What ``_set_cudagraph_sizes`` and ``setup_compile_backend`` read of a VllmConfig."""

    compilation_config: Any
    scheduler_config: _Sched
    parallel_config: _Par
    speculative_config: _Spec | None
    model_config: _Model = field(default_factory=_Model)
    performance_mode: str = "balanced"

    @property
    def uniform_decode_query_len(self) -> int:
        spec = self.speculative_config
        return 1 + (spec.num_speculative_tokens if spec is not None else 0)

    def _set_cudagraph_sizes(self) -> None:
        from vllm.config import VllmConfig

        VllmConfig._set_cudagraph_sizes(self)  # type: ignore[arg-type]


def _configure(seqs: int, spec: int, soc: str, tp: int, sp: bool, resolved: Any,
               budget: int = 8192, user_max: int | None = None) -> Any:
    from vllm.config import CompilationConfig, CompilationMode, CUDAGraphMode
    from vllm_ascend.platform.npu import NPUPlatform

    cc = CompilationConfig(mode=CompilationMode.VLLM_COMPILE,
                           cudagraph_mode=CUDAGraphMode.PIECEWISE,
                           max_cudagraph_capture_size=user_max)
    cfg = _Config(cc, _Sched(seqs, budget), _Par(tp, sp), _Spec(spec) if spec else None)
    NPUPlatform.apply_config_platform_defaults(cfg)  # type: ignore[arg-type]
    cfg._set_cudagraph_sizes()  # VllmConfig.__post_init__
    cs.setup_compile_backend(cfg, resolved, soc, environ={})  # check_and_update_config
    return cc


@pytest.fixture
def resolved() -> Any:
    import ascend_config

    reset_process_setup()
    yield ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    reset_process_setup()


@pytest.mark.parametrize("soc", ["A2", "A3", "A5", "310P"])
@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, True), (4, True)])
def test_the_largest_decode_batch_is_captured_for_every_max_num_seqs(
    soc: str, tp: int, sp: bool, resolved: Any, caplog: Any
) -> None:
    # Quiet vLLM's "Truncating max_cudagraph_capture_size" and the plugin's notes per case.
    caplog.set_level(logging.ERROR, logger="vllm.config.vllm")
    caplog.set_level(logging.ERROR, logger="vllm_ascend.config_pipeline.compile_settings")
    failures = []
    for spec in range(4):
        for seqs in range(1, 513):
            cc = _configure(seqs, spec, soc, tp, sp, resolved)
            reset_process_setup()
            sizes = cc.cudagraph_capture_sizes
            largest = min(seqs * (1 + spec), 512, 8192)
            bound = 4 if soc == "A5" else GRID_BOUND
            ok = (
                sizes == sorted(set(sizes)) and sizes[-1] == cc.max_cudagraph_capture_size
                and cc.max_cudagraph_capture_size >= largest
                and min(s for s in sizes if s >= largest) <= 8192
                and len(sizes) <= bound
                and all(s % tp == 0 for s in sizes)
            )
            if not ok:
                failures.append((seqs, spec, sizes))
    assert failures == [], f"{len(failures)} cases, first: {failures[:3]}"


def test_a_decode_batch_wider_than_the_ceiling_or_the_budget_runs_eagerly(resolved: Any) -> None:
    cc = _configure(512, 3, "A2", 1, False, resolved)  # 2048 decode tokens > 512
    assert cc.max_cudagraph_capture_size == 512
    reset_process_setup()
    cc = _configure(100, 0, "A2", 1, False, resolved, budget=90)  # budget 90 < 100 seqs
    assert cc.max_cudagraph_capture_size == 90 and 90 in cc.cudagraph_capture_sizes


def test_a_max_the_user_set_is_kept_and_wider_batches_run_eagerly(resolved: Any) -> None:
    cc = _configure(9, 0, "A2", 1, False, resolved, user_max=9)
    assert cc.cudagraph_capture_sizes == [1, 2, 4, 8]  # vLLM truncates to its grid; no cover
    assert cc.max_cudagraph_capture_size == 8


def test_an_off_grid_default_max_gains_a_covering_size(resolved: Any) -> None:
    cc = _configure(9, 0, "A2", 1, False, resolved)
    assert cc.cudagraph_capture_sizes == [1, 2, 4, 8, 9]
    assert cc.max_cudagraph_capture_size == 9
    assert cs.update_cudagraph_capture_sizes(cc, [1, 2, 4, 8, 9, 16], reason="why") == [
        "capture sizes [16] added (why); max_cudagraph_capture_size 9 -> 16"]


def test_covering_capture_sizes_at_its_boundaries() -> None:
    assert cs.covering_capture_sizes([1, 2, 4, 8], 8, 8192) == [1, 2, 4, 8]
    assert cs.covering_capture_sizes([1, 2, 4, 8], 9, 8192) == [1, 2, 4, 8, 9]
    assert cs.covering_capture_sizes([2, 4, 8], 9, 8192, multiple_of=4) == [2, 4, 8, 12]
    assert cs.covering_capture_sizes([2, 4, 8], 9, 11, multiple_of=4) == [2, 4, 8]  # > budget
    assert cs.covering_capture_sizes([2, 4, 8], 9, 12, multiple_of=4) == [2, 4, 8, 12]


def test_largest_decode_batch_is_none_when_the_user_chose() -> None:
    none = cs.UserCaptureSettings()
    assert cs.largest_decode_batch(3, 1, 8192, none) == 6
    assert cs.largest_decode_batch(300, 1, 8192, none) == 512
    assert cs.largest_decode_batch(300, 1, 100, none) == 100
    assert cs.largest_decode_batch(3, 1, 8192, cs.UserCaptureSettings(max_size=4)) is None
    assert cs.largest_decode_batch(3, 1, 8192, cs.UserCaptureSettings(sizes=(1, 2))) is None
