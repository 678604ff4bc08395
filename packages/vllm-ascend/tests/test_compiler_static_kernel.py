"""enable_static_kernel reaches npugraph_ex (the seam's bundled extension, whose config takes
only the real options): the options it receives, the decode batch sizes, LOCAL_WORLD_SIZE, and
the graph modes npugraph_ex serves."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tools.npu_seam import install


@pytest.fixture
def fake_npugraph_ex(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """The seam's torch_npu with npugraph_ex; records the options its own helper applied."""
    fake = install(monkeypatch)
    seen = types.SimpleNamespace(options=[], backends=0)
    ext = sys.modules["npugraph_ex"]
    helper_module = sys.modules[f"{ext.__name__}.configs.compiler_config"]
    helper, get_backend = helper_module._process_kwargs_options, ext.get_npu_backend

    def process_kwargs_options(config: Any, kwargs: dict[str, Any]) -> None:
        seen.options.append(dict(kwargs["options"]))
        helper(config, kwargs)  # the seam's: an option the real config lacks is a ValueError

    def get_npu_backend(**kwargs: Any) -> Any:
        seen.backends += 1
        return get_backend(**kwargs)

    monkeypatch.setattr(helper_module, "_process_kwargs_options", process_kwargs_options)
    monkeypatch.setattr(ext, "get_npu_backend", get_npu_backend)
    try:
        yield seen
    finally:
        fake.close()


def _compile(make_vllm_config: Any, mode: str, *, static: bool = True,
             local_world_size: str | None = None) -> Any:
    """Build a config (vLLM's CPU platform writes LOCAL_WORLD_SIZE itself), then set or clear
    LOCAL_WORLD_SIZE and compile a tiny graph."""
    import os

    from ascend_graph import GraphFusionPassManager
    from vllm.config import CUDAGraphMode
    from vllm_ascend.compilation.compiler import PASS_KEY, AscendCompiler

    cfg = make_vllm_config(max_num_seqs=4, additional_config={
        "ascend_compilation_config": {"enable_static_kernel": static}})
    cc = cfg.compilation_config
    cc.cudagraph_mode = CUDAGraphMode[mode]
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4, 8, 16], 16
    os.environ.pop("LOCAL_WORLD_SIZE", None)
    if local_world_size is not None:
        os.environ["LOCAL_WORLD_SIZE"] = local_world_size
    compiler = AscendCompiler()
    compiler.compute_hash(cfg)
    compiler.initialize_cache("/tmp/unused", disable_cache=True)
    gm = torch.fx.symbolic_trace(lambda x: (x * 2,))
    fn, _ = compiler.compile(gm, [torch.ones(3)], {PASS_KEY: GraphFusionPassManager()}, None)
    assert torch.equal(fn(torch.ones(3))[0], torch.full((3,), 2.0))
    return compiler


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "FULL"])
def test_static_kernel_options_and_decode_sizes_reach_npugraph_ex(
    mode: str, make_vllm_config: Any, fake_npugraph_ex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    compiler = _compile(make_vllm_config, mode)
    assert compiler.backend == "npugraph_ex" and fake_npugraph_ex.backends == 1
    # q_len 1 .. max_num_seqs 4: 8 and 16 are not decode batch sizes.
    assert fake_npugraph_ex.options == [{
        "force_eager": True, "inplace_pass": False, "clone_input": False, "clone_output": False,
        "static_kernel_compile": True, "_vllm_aclnn_static_kernel_sym_range": [1, 2, 4],
    }]
    assert os.environ["LOCAL_WORLD_SIZE"] == "1"  # local world 1 x local DP 1


def test_local_world_size_already_set_is_kept_and_static_off_sends_no_sizes(
    make_vllm_config: Any, fake_npugraph_ex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    _compile(make_vllm_config, "FULL_DECODE_ONLY", local_world_size="16")
    assert os.environ["LOCAL_WORLD_SIZE"] == "16"
    _compile(make_vllm_config, "FULL_DECODE_ONLY", static=False)
    assert "static_kernel_compile" not in fake_npugraph_ex.options[-1]
    assert "LOCAL_WORLD_SIZE" not in os.environ


@pytest.mark.parametrize("mode", ["PIECEWISE", "FULL_AND_PIECEWISE", "NONE"])
def test_npugraph_ex_is_not_used_for_piecewise_or_no_graphs(
    mode: str, make_vllm_config: Any, fake_npugraph_ex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    compiler = _compile(make_vllm_config, mode)
    assert "LOCAL_WORLD_SIZE" not in os.environ
    assert compiler.backend == "eager" and not compiler.static_kernel.enabled
    assert fake_npugraph_ex.backends == 0 and fake_npugraph_ex.options == []


def test_static_kernel_plan_local_world_size() -> None:
    from vllm_ascend.compilation.compiler import StaticKernelPlan

    cfg = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(cudagraph_capture_sizes=[1, 2, 3, 4, 6, 8, 9]),
        parallel_config=types.SimpleNamespace(local_world_size=4, data_parallel_size_local=2),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=2),
        scheduler_config=types.SimpleNamespace(max_num_seqs=3),
    )
    plan = StaticKernelPlan.from_vllm_config(cfg, True)
    # q_len = 3: sizes 3 .. 9 (max_num_seqs 3 x q_len), both ends included.
    assert plan == StaticKernelPlan(True, (3, 4, 6, 8, 9), 8)
    env: dict[str, str] = {}
    assert plan.apply_environment(env) == "8" and env == {"LOCAL_WORLD_SIZE": "8"}
    assert StaticKernelPlan.from_vllm_config(cfg, False) == StaticKernelPlan()
    assert StaticKernelPlan().apply_environment(env := {}) is None and env == {}
