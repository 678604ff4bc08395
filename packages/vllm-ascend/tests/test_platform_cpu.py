"""The host-CPU platform with real VllmConfig objects built for a tiny local Qwen3."""

from __future__ import annotations

import json
import logging
import os

import pytest


def test_current_platform_is_the_ascend_host_cpu_platform(ascend_cpu_platform) -> None:
    assert ascend_cpu_platform.soc == "cpu" and ascend_cpu_platform.is_cpu()
    assert ascend_cpu_platform.get_pass_manager_cls() == (
        "vllm_ascend.compilation.pass_manager.AscendPassManager")


def test_config_creation_runs_the_whole_pipeline(make_vllm_config) -> None:
    from vllm.config import CompilationMode
    from vllm_ascend.config_pipeline.compile_settings import VLLM_GPU_FUSION_FLAGS

    cfg = make_vllm_config()
    cc = cfg.compilation_config
    assert cc.mode == CompilationMode.VLLM_COMPILE and cc.backend == "inductor"
    assert cc.compile_sizes == [] and cc.ir_enable_torch_wrap is False
    assert cc.custom_ops == ["all"]
    assert not any(getattr(cc.pass_config, f, False) for f in VLLM_GPU_FUSION_FLAGS)
    prio = cfg.kernel_config.ir_op_priority
    assert prio.rms_norm[0] == "ascend" and prio.fused_add_rms_norm[0] == "ascend"
    # vLLM's CPU worker with the per-rank binding hook
    assert cfg.parallel_config.worker_cls == "vllm_ascend.cpu_runtime.worker.AscendCPUWorker"
    assert cfg.additional_config == {}  # never used as a scratchpad
    from vllm_ascend.base.config_channel import published_inputs

    inputs = published_inputs()
    assert inputs is not None
    assert inputs["soc"] == "cpu" and inputs["facts"]["model_type"] == "qwen3"
    assert inputs["facts"]["head_dim"] == 64 and inputs["facts"]["is_moe"] is False


def test_engine_side_and_worker_side_configs_are_equal(make_vllm_config) -> None:
    from vllm_ascend.engine import engine_of
    from vllm_ascend.engine.resolution import resolve_published

    extra = {"ascend_compilation_config": {"fuse_qknorm_rope": False}, "weight_nz_mode": 0}
    cfg = make_vllm_config(additional_config=extra)
    engine_side = engine_of(cfg).config  # the pipeline's own engine
    soc, worker_side, _ = resolve_published(os.environ)
    assert soc == "cpu" and worker_side == engine_side
    assert worker_side.ascend_compilation_config.fuse_qknorm_rope is False
    assert cfg.additional_config == extra


def test_enforce_eager_keeps_custom_ops_but_no_compilation(make_vllm_config) -> None:
    from vllm.config import CompilationMode

    cfg = make_vllm_config(enforce_eager=True)
    assert cfg.compilation_config.mode == CompilationMode.NONE
    assert cfg.compilation_config.custom_ops == ["all"]


def test_bad_additional_config_lists_every_problem(make_vllm_config) -> None:
    import ascend_config

    bad = {"weight_nz_mode": 7, "ascend_compilation_config": {"fuse_qknorm_rop": True},
           "no_such_key": 1}
    with pytest.raises((ascend_config.AscendConfigError, ValueError)) as info:
        make_vllm_config(additional_config=bad)
    text = str(info.value)
    for needle in ("weight_nz_mode", "fuse_qknorm_rop", "no_such_key"):
        assert needle in text


def test_environment_validation_knows_ascend_variables(ascend_cpu_platform, caplog,
                                                       monkeypatch) -> None:
    from vllm import envs

    for name in list(os.environ):  # e.g. VLLM_DIST_IDENT, set by vLLM's own CPU worker
        if name.startswith("VLLM_") and name not in envs.environment_variables:
            monkeypatch.delenv(name)
    monkeypatch.setenv("VLLM_ASCEND_DEVICE", "cpu")
    monkeypatch.setenv("VLLM_NOT_A_REAL_VARIABLE", "1")
    with caplog.at_level(logging.WARNING):
        ascend_cpu_platform.validate_environ(hard_fail=False)
    assert "VLLM_NOT_A_REAL_VARIABLE" in caplog.text and "VLLM_ASCEND_DEVICE" not in caplog.text
    with pytest.raises(ValueError, match="VLLM_NOT_A_REAL_VARIABLE"):
        ascend_cpu_platform.validate_environ(hard_fail=True)


def test_workers_resolve_like_the_engine_after_env_changes(make_vllm_config) -> None:
    import ascend_config
    from vllm_ascend.base.config_channel import publish_worker_inputs
    from vllm_ascend.engine.resolution import extract_facts, resolve_published
    from vllm_ascend.process.batch_invariance import apply_env_changes

    rl = {"rl_config": {"enabled": True, "enable_batch_invariant": True}}
    facts = extract_facts(make_vllm_config(enforce_eager=True), "cpu")
    engine_env = {"VLLM_ASCEND_ENABLE_NZ": "2"}
    engine_side = ascend_config.resolve(rl, facts=facts, environ=engine_env)
    child_env: dict[str, str] = {}
    assert publish_worker_inputs("cpu", rl, facts, engine_env, environ=child_env)
    apply_env_changes(engine_side.env_changes, child_env)  # what the engine process did
    assert child_env["VLLM_BATCH_INVARIANT"] == "1"
    assert resolve_published(child_env)[:2] == ("cpu", engine_side)


def test_published_inputs_never_embed_the_previous_publication() -> None:
    """The worker-inputs variable is an output, not a resolution input: were it read back,
    each publication would hash in the previous one, so equal inputs would never share a file."""
    import types

    from vllm_ascend.base.config_channel import (
        WORKER_INPUTS_ENV,
        ascend_environ,
        publish_worker_inputs,
        published_inputs,
    )

    facts = types.SimpleNamespace(to_dict=lambda: {"soc": "cpu"})
    env = {"VLLM_ASCEND_ENABLE_NZ": "0"}
    paths = []
    for _ in range(5):
        assert publish_worker_inputs("cpu", {}, facts, ascend_environ(env), environ=env)
        paths.append(env[WORKER_INPUTS_ENV])
    assert WORKER_INPUTS_ENV not in ascend_environ(env)
    inputs = published_inputs(env)
    assert len(set(paths)) == 1 and inputs is not None
    assert inputs["environ"] == {"VLLM_ASCEND_ENABLE_NZ": "0"}


def test_building_configs_repeatedly_keeps_the_published_inputs_stable(make_vllm_config) -> None:
    from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV, published_inputs

    sizes = []
    for _ in range(3):
        make_vllm_config(enforce_eager=True)
        inputs = published_inputs()
        assert inputs is not None and WORKER_INPUTS_ENV not in inputs["environ"]
        sizes.append(len(json.dumps(inputs)))
    # The first build applies the resolved env changes (e.g. VLLM_DISABLE_SHARED_EXPERTS_STREAM),
    # which later builds see as set: from then on the publication is the same size, not
    # growing with every config built.
    assert sizes[1] == sizes[2] and sizes[1] - sizes[0] < 200, sizes


def test_a_config_without_a_model_builds_vllms_pass_manager_as_stock_vllm_does(
    make_env, tmp_path
) -> None:
    """vLLM's own tests build ``VllmConfig()`` (no model) and configure its PostGradPassManager
    (``tests/compile/passes/test_pass_manager.py::test_bad_callable``,
    ``tests/test_config.py::test_compile_config_repr_succeeds``). The Ascend IR priority
    (``rms_norm``: ascend first) makes vLLM switch fuse_norm_quant on, whose pass class this
    vLLM build does not define: a NameError unless the pipeline turns it off again. Expected:
    the fusion flags and passes stock vLLM CPU (no plugin loaded) gives the same config."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import json
        from vllm.compilation.passes.pass_manager import PostGradPassManager
        from vllm.config import VllmConfig
        from vllm.config.vllm import enable_norm_fusion
        from vllm.platforms import current_platform

        config = VllmConfig()
        manager = PostGradPassManager()
        manager.configure(config)
        pc = config.compilation_config.pass_config
        print("RESULT " + json.dumps({
            "platform": type(current_platform).__name__,
            "no_model": config.model_config is None,
            "vllm_would_fuse": enable_norm_fusion(config),
            "fuse": {k: v for k, v in vars(pc).items() if k.startswith("fuse_")},
            "passes": [type(p).__name__ for p in manager.passes],
            "repr": "pass_config" in repr(config.compilation_config)}))
    """)
    plugin_env = make_env(tmp_path / "plugin", VLLM_ASCEND_DEVICE="cpu")
    plugin_env.pop("VLLM_PLUGINS", None)
    stock_env = make_env(tmp_path / "stock", VLLM_PLUGINS="none")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for env in (plugin_env, stock_env)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, err[-3000:]
        results.append(json.loads(lines[-1][len("RESULT "):]))
    plugin, stock = results
    assert plugin["platform"] == "AscendCpuPlatform" and stock["platform"] == "CpuPlatform"
    assert plugin["no_model"] and stock["no_model"]
    assert plugin["vllm_would_fuse"] is True  # what switched fuse_norm_quant on
    assert plugin["fuse"]["fuse_norm_quant"] is False
    # Stock leaves some flags unresolved (None) where the pipeline writes False: both are off.
    assert {k for k, v in plugin["fuse"].items() if v} == {k for k, v in stock["fuse"].items() if v}
    assert set(plugin["fuse"]) == set(stock["fuse"])
    assert plugin["passes"] == stock["passes"]
    assert plugin["repr"] and stock["repr"]


# --- the executor of one rank (config_pipeline.parallel_layout.keep_one_rank_in_engine_core) -

def _backend(make_vllm_config, monkeypatch, multiprocessing: str, **kwargs) -> str:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", multiprocessing)
    return str(make_vllm_config(**kwargs).parallel_config.distributed_executor_backend)


def test_one_rank_runs_its_worker_in_the_engine_core_process(make_vllm_config, monkeypatch,
                                                             logged) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    # Stock vLLM CPU makes this "mp" (a worker process beside a polling engine core).
    with logged("vllm_ascend.config_pipeline.parallel_layout") as lines:
        assert _backend(make_vllm_config, monkeypatch, "1") == "uni"
    assert any("the worker runs in the engine core process" in line for line in lines)
    assert _backend(make_vllm_config, monkeypatch, "0") == "uni"  # in-process: vLLM's own


def test_the_one_rank_rule_keeps_what_it_does_not_own(make_vllm_config, monkeypatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    # The user's executor, two ranks and two data-parallel engines keep vLLM's choice.
    assert _backend(make_vllm_config, monkeypatch, "1", distributed_executor_backend="mp") == "mp"
    assert _backend(make_vllm_config, monkeypatch, "1", tensor_parallel_size=2) == "mp"
    assert _backend(make_vllm_config, monkeypatch, "1", data_parallel_size=2) == "mp"
    # A user's OpenMP binding is applied by vLLM's worker process.
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    assert _backend(make_vllm_config, monkeypatch, "1") == "mp"
