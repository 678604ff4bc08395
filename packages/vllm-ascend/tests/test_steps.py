"""The config pipeline's orchestrator (``config_pipeline.steps``): the NPU platform's
attributes and hooks, both pipelines end to end on real VllmConfigs, and the msprobe dump config
they write. Each phase module's rules have a file of their own (test_vllm_settings.py,
test_compile_settings.py, test_workers.py, test_memory.py, test_parallel_rules.py,
test_rank_binding.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.config_pipeline import compile_settings


def _kv_config(make_vllm_config, engine_id="prefill-0"):
    kv = {"kv_connector": "ExampleConnector", "kv_role": "kv_producer", "engine_id": engine_id}
    return make_vllm_config(enforce_eager=True, kv_transfer_config=kv)


def test_npu_platform_attributes_and_capabilities() -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    p = NPUPlatform()
    assert (p.device_name, p.device_type, p.dispatch_key) == ("npu", "npu", "PrivateUse1")
    assert p.device_control_env_var == "ASCEND_RT_VISIBLE_DEVICES"
    assert p.ray_device_key == "NPU" and p.simple_compile_backend == "eager"
    assert p.ray_noset_device_env_vars == ["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]
    assert p.supported_quantization == ["ascend"]  # ModelSlim W8A8, the one method it runs
    assert p.pass_key == "graph_fusion_manager" and p.is_out_of_tree()
    # What the NPU runtime of vllm_ascend.npu_runtime provides: no sleep-mode pool, no
    # pluggable allocator, one full-attention KV group (dense models).
    assert not p.is_sleep_mode_available() and not p.is_cumem_allocator_available()
    assert not p.support_hybrid_kv_cache()
    assert all(f() for f in (p.is_pin_memory_available, p.opaque_attention_op,
                             p.support_static_graph_mode, p.use_custom_op_collectives))
    import torch

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        p.check_if_supports_dtype(dtype)
    with pytest.raises(ValueError, match=r"torch\.float64 is not supported.*allowed: "
                                         r"torch\.float16, torch\.bfloat16, torch\.float32"):
        p.check_if_supports_dtype(torch.float64)
    assert p.get_device_capability() is None
    assert p.get_compile_backend() == "vllm_ascend.compilation.compiler.AscendCompiler"
    assert p.get_static_graph_wrapper_cls() == (
        "vllm_ascend.compilation.graph_wrapper.AscendGraphWrapper")
    with pytest.raises(NotImplementedError):
        p.get_device_total_memory()
    assert p.set_additional_forward_context(vllm_config=types.SimpleNamespace()) == {}


def test_runtime_pieces_come_from_entry_points(monkeypatch, fake_torch_npu) -> None:
    from pathlib import Path

    from vllm_ascend.platform.npu import NPUPlatform

    with pytest.raises(RuntimeError, match=r"'vllm_ascend\.npu_runtime' name 'punica'"):
        NPUPlatform.get_punica_wrapper()
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    assert NPUPlatform.get_punica_wrapper() == "ascend_test_ext.TestWorker"
    assert NPUPlatform.get_device_communicator_cls() == "ascend_test_ext.TestWorker"
    assert NPUPlatform.get_attn_backend_cls(None, None) == "ascend_test_ext.TestWorker"
    import ascend_test_ext

    NPUPlatform.register_custom_kv_cache_specs("cfg")
    assert ascend_test_ext.REGISTERED_SPECS[-1] == "cfg"


def test_pre_register_adds_ascend_quantization_once(fake_torch_npu) -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    parser = argparse.ArgumentParser()
    parser.add_argument("--quantization", choices=["fp8", "awq"])
    NPUPlatform.pre_register_and_update(parser)
    NPUPlatform.pre_register_and_update(parser)
    NPUPlatform.pre_register_and_update(None)
    action = next(a for a in parser._actions if "--quantization" in a.option_strings)
    assert list(action.choices) == ["fp8", "awq", "ascend"]


def test_missing_npu_runtime_is_reported_at_configuration_time(py_runner, make_env,
                                                              tiny_qwen3, tmp_path) -> None:
    code = f"""
        import json
        from vllm.platforms import current_platform
        from vllm.engine.arg_utils import EngineArgs
        try:
            EngineArgs(model={str(tiny_qwen3)!r}, load_format="dummy").create_engine_config()
            err = None
        except Exception as exc:
            err = type(exc).__name__ + ": " + str(exc)
        print("RESULT " + json.dumps({{"platform": type(current_platform).__name__,
                                       "err": err}}))
    """
    out = py_runner(code, make_env(tmp_path, VLLM_ASCEND_DEVICE="npu"), timeout=240)
    assert out["platform"] == "NPUPlatform"
    assert out["err"].startswith("NpuRuntimeMissingError") and "torch_npu is missing" in (
        out["err"])


def test_whole_npu_pipeline_on_a_real_config(make_vllm_config, fake_torch_npu,
                                             monkeypatch) -> None:
    """The NPU pipeline end to end with the fake torch_npu and the test runtime package."""
    from pathlib import Path

    from vllm.config import CompilationMode, CUDAGraphMode
    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    cfg = make_vllm_config(enforce_eager=True, block_size=64, enable_prefix_caching=True)
    cfg.attention_config.flash_attn_version = 3
    cfg.parallel_config.worker_cls = "auto"  # as on an NPU host (the CPU platform set it)
    import os

    affinity = os.sched_getaffinity(0)
    resolved = run_npu_pipeline(cfg, "A2")
    assert os.sched_getaffinity(0) == affinity
    assert resolved.ascend_compilation_config.fuse_qknorm_rope is True
    assert cfg.parallel_config.worker_cls == "ascend_test_ext.TestWorker"
    assert cfg.compilation_config.mode == CompilationMode.NONE
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode.NONE
    assert cfg.compilation_config.backend == compile_settings.COMPILER_PATH
    assert cfg.attention_config.flash_attn_version is None
    assert cfg.cache_config.block_size == 128
    assert os.environ["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert os.environ["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "3000"
    from vllm_ascend.process.process_setup import current_process_setup

    # The engine side knows no worker rank: it binds nothing (workers bind themselves).
    assert current_process_setup().cpu_binding == []


def test_npu_pipeline_run_twice_suffixes_the_engine_id_once(make_vllm_config, fake_torch_npu,
                                                             monkeypatch) -> None:
    import re
    from pathlib import Path

    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    cfg = _kv_config(make_vllm_config, engine_id="p0")
    cfg.parallel_config.worker_cls = "auto"
    cfg.compilation_config.custom_ops = ["none"]
    run_npu_pipeline(cfg, "A2")
    assert cfg.compilation_config.custom_ops == ["all"]  # every Ascend custom op (not 310P)
    first = cfg.kv_transfer_config.engine_id
    assert re.fullmatch(r"p0-[0-9a-f]{32}", first)
    cfg.parallel_config.worker_cls = "auto"
    run_npu_pipeline(cfg, "A2")
    assert cfg.kv_transfer_config.engine_id == first


def test_pipeline_skips_other_devices_and_missing_model_config(make_vllm_config,
                                                               caplog) -> None:
    """Reference 4.3 step 2: a non-NPU device config is left alone; no model config -> one
    warning, and only vLLM's GPU-only fusion flags switched off."""
    import logging

    from vllm_ascend.config_pipeline.steps import run_cpu_pipeline, run_npu_pipeline
    from vllm_ascend.platform.npu import NPUPlatform

    cfg = make_vllm_config(enforce_eager=True)
    assert cfg.device_config.device_type == "cpu"
    backend, workers = cfg.compilation_config.backend, cfg.parallel_config.worker_cls
    NPUPlatform.check_and_update_config(cfg)  # would need torch_npu if it ran
    assert (cfg.compilation_config.backend, cfg.parallel_config.worker_cls) == (backend, workers)
    def no_model() -> types.SimpleNamespace:
        passes = types.SimpleNamespace(fuse_norm_quant=True, fuse_act_quant=False)
        return types.SimpleNamespace(
            model_config=None, compilation_config=types.SimpleNamespace(pass_config=passes))

    npu_side = no_model()
    with caplog.at_level(logging.WARNING):
        assert run_npu_pipeline(npu_side, "A2") is None
    assert "Model config is missing" in caplog.text
    cpu_side = no_model()
    defaults = []
    assert run_cpu_pipeline(cpu_side, defaults.append) is None
    assert defaults == [cpu_side]  # the CPU platform's own defaults still apply
    for cfg in (npu_side, cpu_side):
        assert vars(cfg.compilation_config.pass_config) == {
            "fuse_norm_quant": False, "fuse_act_quant": False}


def test_platform_defaults_and_block_size_hooks_on_real_configs(make_vllm_config) -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    cfg = make_vllm_config(enforce_eager=True, max_num_seqs=40)
    cc = cfg.compilation_config
    cc.max_cudagraph_capture_size, cc.cudagraph_capture_sizes = None, None
    NPUPlatform.apply_config_platform_defaults(cfg)
    assert cc.max_cudagraph_capture_size == 40
    cc.max_cudagraph_capture_size = 8  # an explicit user value is kept
    NPUPlatform.apply_config_platform_defaults(cfg)
    assert cc.max_cudagraph_capture_size == 8
    before = cfg.cache_config.block_size
    NPUPlatform.update_block_size_for_backend(cfg)  # dense model: unchanged
    assert cfg.cache_config.block_size == before


@pytest.fixture
def post_grad_pass_manager():
    """vLLM's PostGradPassManager, imported before the fake torch_npu is installed (the import
    reaches transformers, which probes torch_npu for attributes the fake does not model)."""
    from vllm.compilation.passes.pass_manager import PostGradPassManager

    return PostGradPassManager


def test_npu_pipeline_leaves_no_vllm_gpu_fusion_on_with_or_without_a_model(
    post_grad_pass_manager, make_vllm_config, fake_torch_npu, monkeypatch
) -> None:
    """vLLM switches fuse_norm_quant on when rms_norm's first IR provider is not native (the
    Ascend priority); its pass class exists only on CUDA/XPU, so vLLM's PostGradPassManager
    (AscendPassManager's base) would fail with a NameError."""
    from pathlib import Path

    from vllm.config import VllmConfig
    from vllm.config.vllm import enable_norm_fusion
    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    modelless = VllmConfig()
    with_model = make_vllm_config(enforce_eager=True)
    with_model.parallel_config.worker_cls = "auto"  # as on an NPU host
    for cfg in (modelless, with_model):
        pc = cfg.compilation_config.pass_config
        # What vLLM's optimization-level defaults set on an NPU host (this session's host-CPU
        # platform has already turned it off).
        pc.fuse_norm_quant = enable_norm_fusion(cfg)
        assert pc.fuse_norm_quant is True
        run_npu_pipeline(cfg, "A2")
        assert not any(getattr(pc, f, False) for f in compile_settings.VLLM_GPU_FUSION_FLAGS)
        post_grad_pass_manager().configure(cfg)  # NameError when one is left on


DUMP = {"task": "statistics", "level": "L1", "dump_path": "/tmp/msprobe", "step": [0, 1],
        "note": "données"}


TARGET = Path(".vllm_ascend") / "msprobe" / "msprobe_dump_config.json"


def test_config_build_writes_the_dump_file(make_vllm_config: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_vllm_config(additional_config={"dump_config": DUMP})  # runs the platform pipeline
    written = tmp_path / TARGET
    assert json.loads(written.read_text(encoding="utf-8")) == DUMP
    assert "données" in written.read_text(encoding="utf-8")  # non-ASCII kept
    assert list(written.parent.iterdir()) == [written]  # no temporary file left behind


def test_no_dump_config_writes_nothing_and_a_path_is_used_as_given(
    make_vllm_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    monkeypatch.chdir(tmp_path)
    make_vllm_config()
    own = tmp_path / "mine.json"
    make_vllm_config(additional_config={"dump_config_path": str(own)})
    assert not (tmp_path / ".vllm_ascend").exists()
    import ascend_config

    resolved = ascend_config.resolve({"dump_config_path": str(own)},
                                     facts=ascend_config.DeploymentFacts())
    assert write_dump_config(resolved, str(tmp_path)) == own


def test_unwritable_target_is_one_clear_error(tmp_path: Path) -> None:
    import ascend_config
    from vllm_ascend.config_pipeline.steps import write_dump_config

    (tmp_path / ".vllm_ascend").write_text("a file where the directory should be")
    resolved = ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())
    with pytest.raises(RuntimeError, match=r"dump_config: cannot write .*msprobe_dump_config"):
        write_dump_config(resolved, str(tmp_path))


OTHER_UID = 12345


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a path to another uid needs "
                                                          "root (chown)")


@pytest.fixture
def steps_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The step's warnings, also when the vllm_ascend logger no longer propagates to root."""
    logger = logging.getLogger("vllm_ascend.config_pipeline.steps")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def _resolved() -> Any:
    import ascend_config

    return ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())


def _refused(tmp_path: Path, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) is None
    records = {id(r): r for r in caplog.records}.values()  # root may have seen it too
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"dump_config: not writing {tmp_path / TARGET}: ")
    assert reason in warnings[0]


def test_the_dump_directory_is_made_private(tmp_path: Path) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET
    for folder in (tmp_path / ".vllm_ascend", tmp_path / TARGET.parent):
        assert folder.stat().st_mode & 0o777 == 0o700
    assert json.loads((tmp_path / TARGET).read_text(encoding="utf-8")) == DUMP
    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET  # again: fine


@needs_root
def test_a_dump_directory_another_user_made_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    planted = tmp_path / TARGET.parent
    planted.mkdir(parents=True, mode=0o755)
    (planted / TARGET.name).write_text('{"task": "theirs"}')
    os.chown(planted, OTHER_UID, OTHER_UID)
    _refused(tmp_path, steps_warnings, f"owned by uid {OTHER_UID}")
    assert (planted / TARGET.name).read_text() == '{"task": "theirs"}'
    assert sorted(p.name for p in planted.iterdir()) == [TARGET.name]  # no temporary file


def test_a_dump_directory_others_can_write_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    planted = tmp_path / TARGET.parent
    planted.mkdir(parents=True)
    os.chmod(planted, 0o777)
    _refused(tmp_path, steps_warnings, "writable by group or others (mode 777)")
    assert list(planted.iterdir()) == []


@needs_root
def test_a_dump_directory_reached_through_another_users_symlink_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)  # a directory of ours, but the link's owner chose it
    (tmp_path / ".vllm_ascend").symlink_to(theirs)
    os.lchown(tmp_path / ".vllm_ascend", OTHER_UID, OTHER_UID)
    _refused(tmp_path, steps_warnings, f".vllm_ascend is a symlink owned by uid {OTHER_UID}")
    assert list(theirs.iterdir()) == []  # not even the msprobe folder was made
    os.lchown(tmp_path / ".vllm_ascend", 0, 0)  # the same link owned by this user: followed
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET
    assert json.loads((theirs / "msprobe" / TARGET.name).read_text(encoding="utf-8")) == DUMP


@needs_root
def test_a_dump_directory_reached_by_dotdot_through_another_users_link_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    # <their link>/../work: the text collapses to <tmp>/work, the kernel opens the folder
    # above the link's target (theirs), where msprobe's config would be written.
    theirs = tmp_path / "theirs"
    (theirs / "deep").mkdir(parents=True)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    link = tmp_path / "link"
    link.symlink_to(theirs / "deep")
    os.lchown(link, OTHER_UID, OTHER_UID)
    from vllm_ascend.config_pipeline.steps import write_dump_config

    cwd = f"{link}/../work"
    assert write_dump_config(_resolved(), cwd) is None
    records = {id(r): r for r in steps_warnings.records}.values()
    [warning] = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert f"{link} is a symlink owned by uid {OTHER_UID}" in warning
    assert sorted(p.name for p in theirs.iterdir()) == ["deep"]
    assert not (tmp_path / "work").exists()


def test_npu_pipeline_selects_ascend_for_a_modelslim_checkpoint_found_by_its_description(
        make_vllm_config, fake_torch_npu, tiny_qwen3, tmp_path, monkeypatch) -> None:
    """A ModelSlim checkpoint whose config.json names no method (only its
    quant_model_description.json says "ascend") passes vLLM's model config; the NPU pipeline
    selects "ascend" for it, which the NPU runtime runs (npu_linear_methods)."""
    import json
    import shutil

    from vllm_ascend.config_pipeline.steps import run_npu_pipeline
    from vllm_ascend.quantization import DESCRIPTION_FILE

    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    model = shutil.copytree(tiny_qwen3, tmp_path / "modelslim")
    cfg = make_vllm_config(model=str(model), enforce_eager=True)  # built unquantized
    (model / DESCRIPTION_FILE).write_text(json.dumps(
        {"model_quant_type": "W8A8", "model.layers.0.mlp.down_proj.weight": "W8A8"}))
    cfg.parallel_config.worker_cls = "auto"  # this package's NPU runtime worker
    run_npu_pipeline(cfg, "A2")
    assert cfg.model_config.quantization == "ascend"
