"""Each graph capture logs its size and seconds, and the rank report carries the rank's totals:
AscendGraphWrapper over the real NPU graph runtime (``NPUGraphRuntime``) with the fake
torch_npu (the NPU seam), driven by vLLM's CudagraphDispatcher and forward context."""

from __future__ import annotations

import re
import time
from typing import Any

import torch

CAPTURE_SECONDS = 0.02  # the runnable sleeps this long, so each capture takes at least it


def _wrapper_and_dispatcher(cfg: Any) -> tuple[Any, Any]:
    from ascend_graph import NPUGraphRuntime
    from vllm.config import CompilationMode, CUDAGraphMode
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
    from vllm_ascend.compilation.graph_wrapper import AscendGraphWrapper, npu_weak_ref_tensors

    cc = cfg.compilation_config
    cc.mode = CompilationMode.VLLM_COMPILE
    cc.cudagraph_mode = CUDAGraphMode.PIECEWISE
    cc.splitting_ops = list(cc._attention_ops)
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4], 4
    dispatcher = CudagraphDispatcher(cfg)
    dispatcher.initialize_cudagraph_keys(CUDAGraphMode.PIECEWISE, 1)

    def runnable(x: torch.Tensor) -> torch.Tensor:
        time.sleep(CAPTURE_SECONDS)
        return x + 1

    runtime = NPUGraphRuntime(weak_ref_fn=npu_weak_ref_tensors)
    wrapper = AscendGraphWrapper(runnable, cfg, CUDAGraphMode.PIECEWISE, runtime=runtime)
    return dispatcher, wrapper


def _step(cfg: Any, dispatcher: Any, wrapper: Any, num_tokens: int) -> Any:
    from vllm.forward_context import set_forward_context

    mode, descriptor = dispatcher.dispatch(num_tokens, uniform_decode=False)
    with set_forward_context(None, cfg, cudagraph_runtime_mode=mode,
                             batch_descriptor=descriptor):
        wrapper(torch.ones(descriptor.num_tokens))
    return descriptor.num_tokens


def _tally(cfg: Any) -> Any:
    from vllm_ascend.engine import engine_of

    return engine_of(cfg).captures


def test_each_capture_logs_its_size_and_the_rank_report_has_the_totals(
    make_vllm_config: Any, request: Any, logged: Any) -> None:
    from vllm_ascend.process.process_setup import reset_process_setup
    from vllm_ascend.worker_duties.rank_report import build_rank_report

    reset_process_setup()
    # The configs first: transformers probes torch_npu while they are built.
    cfg, other = make_vllm_config(max_num_seqs=4), make_vllm_config()
    fake_torch_npu = request.getfixturevalue("fake_torch_npu")
    dispatcher, wrapper = _wrapper_and_dispatcher(cfg)
    report = build_rank_report(cfg, rank=0, local_rank=0, binding=None, stage="device")
    assert report["captures"] == {"count": 0, "seconds": 0.0}  # nothing captured yet

    with logged("vllm_ascend.engine.capture_tally") as lines:
        padded = [_step(cfg, dispatcher, wrapper, n) for n in (3, 1, 3)]  # 3 pads to 4
    assert padded == [4, 1, 4]
    # Two captures on the device (4 then 1); the second batch of 3 replays the graph of 4.
    assert len(fake_torch_npu.npu.called("NPUGraph.capture_begin")) == 2
    assert len(fake_torch_npu.npu.called("NPUGraph.replay")) == 1
    pattern = re.compile(r"graph captured: PIECEWISE num_tokens=(\d+) in ([\d.]+) s "
                         r"\(capture (\d), ([\d.]+) s in all\)")
    parsed = [pattern.fullmatch(line) for line in lines]
    assert all(parsed) and len(parsed) == 2, lines
    assert [(int(m[1]), int(m[3])) for m in parsed if m] == [(4, 1), (1, 2)]
    seconds = [float(m[2]) for m in parsed if m]
    assert all(s >= CAPTURE_SECONDS for s in seconds)

    tally = _tally(cfg)
    assert tally.count == 2 and abs(tally.seconds - sum(seconds)) < 0.002
    report = build_rank_report(cfg, rank=0, local_rank=0, binding=None, stage="warmed_up")
    assert report["captures"] == {"count": 2, "seconds": round(tally.seconds, 6)}
    assert _tally(other).count == 0  # another engine's config: its own tally
    reset_process_setup()


def test_a_failed_capture_is_not_counted(make_vllm_config: Any, request: Any) -> None:
    import pytest
    from vllm_ascend.process.process_setup import reset_process_setup

    reset_process_setup()
    cfg = make_vllm_config(max_num_seqs=4)
    request.getfixturevalue("fake_torch_npu")
    dispatcher, wrapper = _wrapper_and_dispatcher(cfg)

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("capture broke")

    wrapper._wrapper.runnable = broken
    with pytest.raises(RuntimeError, match="capture broke"):
        _step(cfg, dispatcher, wrapper, 2)
    assert _tally(cfg).count == 0
    reset_process_setup()


def test_a_capture_after_ready_is_counted_in_the_report_and_strict_refuses_it(
    make_vllm_config: Any, request: Any
) -> None:
    import pytest
    from vllm_ascend.engine import engine_of
    from vllm_ascend.engine.ready_watch import CompileAfterReadyError
    from vllm_ascend.worker_duties.rank_report import build_rank_report

    cfg, strict_cfg = make_vllm_config(max_num_seqs=4), make_vllm_config(max_num_seqs=4)
    fake_torch_npu = request.getfixturevalue("fake_torch_npu")
    dispatcher, wrapper = _wrapper_and_dispatcher(cfg)
    _step(cfg, dispatcher, wrapper, 4)  # warm-up capture: before ready
    engine_of(cfg).ready.mark_ready()
    _step(cfg, dispatcher, wrapper, 4)  # a replay: nothing new
    _step(cfg, dispatcher, wrapper, 2)  # a size not captured yet: a capture after ready
    report = build_rank_report(cfg, rank=0, local_rank=0, binding=None, stage="serving")
    assert report["captures"]["count"] == _tally(cfg).count == 2
    assert report["after_ready"] == {"compiles": 0, "pass_runs": 0, "captures": 1,
                                     "causes": ["PIECEWISE num_tokens=2 (a new shape)"]}

    dispatcher, wrapper = _wrapper_and_dispatcher(strict_cfg)
    engine_of(strict_cfg).ready.mark_ready(strict=True)
    begun = len(fake_torch_npu.npu.called("NPUGraph.capture_begin"))
    with pytest.raises(CompileAfterReadyError, match=r"graph capture after the engine was "
                       r"ready: PIECEWISE num_tokens=1 .*forbid_compile_after_ready is true"):
        _step(strict_cfg, dispatcher, wrapper, 1)
    assert len(fake_torch_npu.npu.called("NPUGraph.capture_begin")) == begun  # none begun
    assert _tally(strict_cfg).count == 0
