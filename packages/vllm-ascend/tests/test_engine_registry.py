"""vllm_ascend.engine: one AscendEngine per VllmConfig object, built once by the config
pipeline (or resolved once for a standalone compile), weakly keyed, and the compile hash of an
engine fixed at its creation."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV
from vllm_ascend.engine import AscendEngine, engine_of, registry, resolution


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every resolution the engine registry runs (the additional_config it resolved)."""
    calls: list[dict[str, Any]] = []

    def counted(additional: Any, facts: Any, environ: Any) -> Any:
        calls.append(dict(additional))
        return resolution.resolve_ascend_config(additional, facts, environ)

    monkeypatch.setattr(registry, "resolve_ascend_config", counted)
    return calls


def _publish(env: dict[str, str], additional: dict[str, Any]) -> None:
    import ascend_config
    from vllm_ascend.base.config_channel import publish_worker_inputs

    assert publish_worker_inputs("A2", additional, ascend_config.DeploymentFacts(soc="A2"), {},
                                 env)


@pytest.fixture
def published_resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every resolution of published inputs the registry runs (the channel value read)."""
    calls: list[str] = []

    def counted(environ: Any = None) -> Any:
        calls.append(environ[WORKER_INPUTS_ENV])
        return resolution.resolve_published(environ)

    monkeypatch.setattr(registry, "resolve_published", counted)
    return calls


def test_published_inputs_are_resolved_once_per_publication(
        published_resolutions: list[str]) -> None:
    env: dict[str, str] = {}
    _publish(env, {"enable_cpu_binding": False})
    first = registry.published_engine_inputs(env)
    assert first is not None and first.soc == "A2"
    assert first.config.enable_cpu_binding is False
    assert registry.published_engine_inputs(env) is first
    assert len(published_resolutions) == 1
    _publish(env, {"enable_cpu_binding": True})  # a new publication: resolved again
    second = registry.published_engine_inputs(env)
    assert second is not None and second.config.enable_cpu_binding is True
    assert len(published_resolutions) == 2


def test_no_publication_is_none(published_resolutions: list[str]) -> None:
    assert registry.published_engine_inputs({}) is None
    assert registry.published_engine_inputs({WORKER_INPUTS_ENV: ""}) is None
    assert published_resolutions == []


def test_a_damaged_channel_raises_every_time(published_resolutions: list[str]) -> None:
    from vllm_ascend.base.worker_inputs import WorkerInputsError

    env = {WORKER_INPUTS_ENV: "{not json"}
    for _ in range(2):
        with pytest.raises(WorkerInputsError):
            registry.published_engine_inputs(env)
    assert len(published_resolutions) == 2  # nothing remembered


def test_the_publishing_process_reads_its_own_engine_back(
        make_vllm_config: Any, published_resolutions: list[str]) -> None:
    cfg = make_vllm_config(additional_config={"enable_cpu_binding": False})  # publishes
    published = registry.published_engine_inputs()
    assert published is not None and published.config is engine_of(cfg).config
    assert registry.published_ascend_config() is engine_of(cfg).config
    assert published_resolutions == []


def _standalone_config(additional: dict[str, Any] | None = None) -> Any:
    """A VllmConfig no pipeline ran for (no model), as a standalone compile has."""
    from vllm.config import VllmConfig

    return VllmConfig(additional_config=additional or {})


def test_the_pipeline_builds_the_engine_once(make_vllm_config: Any,
                                             resolutions: list[dict[str, Any]]) -> None:
    cfg = make_vllm_config(additional_config={"enable_cpu_binding": False})
    assert resolutions == [{"enable_cpu_binding": False}]  # the pipeline's one resolution
    engine = engine_of(cfg)
    assert isinstance(engine, AscendEngine) and engine_of(cfg) is engine
    assert engine.soc == "cpu" and engine.config.enable_cpu_binding is False
    assert engine.facts.model_type == "qwen3" and engine.vllm_config is cfg
    assert len(resolutions) == 1  # looked up, never resolved again


def test_the_pipeline_run_again_on_the_same_config_keeps_the_ready_engine(
        make_vllm_config: Any, resolutions: list[dict[str, Any]]) -> None:
    # vLLM's engine core runs VllmConfig.__post_init__ again on its config during its start-up
    # handshake, after the worker marked the engine ready.
    cfg = make_vllm_config(additional_config={"enable_cpu_binding": False})
    engine = engine_of(cfg)
    engine.mark_ready()
    cfg.__post_init__()
    assert engine_of(cfg) is engine and engine.ready.ready
    assert len(resolutions) == 1


def test_the_pipeline_run_again_with_other_inputs_builds_a_new_engine(
        make_vllm_config: Any, resolutions: list[dict[str, Any]]) -> None:
    cfg = make_vllm_config(additional_config={"enable_cpu_binding": False})
    engine = engine_of(cfg)
    cfg.additional_config = {"enable_cpu_binding": True}
    cfg.__post_init__()
    assert engine_of(cfg) is not engine and engine_of(cfg).config.enable_cpu_binding is True
    assert resolutions == [{"enable_cpu_binding": False}, {"enable_cpu_binding": True}]


def test_a_standalone_compile_resolves_once_and_registers(
        monkeypatch: pytest.MonkeyPatch, resolutions: list[dict[str, Any]]) -> None:
    monkeypatch.delenv(WORKER_INPUTS_ENV, raising=False)
    cfg = _standalone_config({"ascend_compilation_config": {"fuse_muls_add": False}})
    engine = engine_of(cfg)
    assert engine_of(cfg) is engine and registry.peek_engine(cfg) is engine
    assert resolutions == [{"ascend_compilation_config": {"fuse_muls_add": False}}]
    assert engine.config.ascend_compilation_config.fuse_muls_add is False
    assert engine.soc == "cpu"  # the current platform's


def test_a_config_the_pipeline_never_saw_takes_the_published_inputs(
        make_vllm_config: Any, resolutions: list[dict[str, Any]]) -> None:
    import copy

    cfg = make_vllm_config(additional_config={"enable_cpu_binding": False})
    worker_copy = copy.copy(cfg)  # what a spawned worker holds: another object
    engine = engine_of(worker_copy)
    assert engine is not engine_of(cfg) and engine_of(worker_copy) is engine
    assert engine.config is engine_of(cfg).config and engine.soc == "cpu"
    assert len(resolutions) == 1  # this process published them: nothing resolved again


def test_engines_of_equal_configs_are_separate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKER_INPUTS_ENV, raising=False)
    one, two = _standalone_config(), _standalone_config()
    assert engine_of(one) is not engine_of(two)
    assert engine_of(one).ready is not engine_of(two).ready


def test_a_freed_config_takes_its_engine_stores_and_callbacks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._dynamo.callback import callback_handler

    monkeypatch.delenv(WORKER_INPUTS_ENV, raising=False)
    before = len(callback_handler.start_callbacks) + len(callback_handler.end_callbacks)
    cfg = _standalone_config()
    engine = engine_of(cfg)
    engine.ready.install()
    engine.captures.add(0.5)
    refs = [weakref.ref(x) for x in (engine, engine.ready, engine.captures, engine.cache_loads)]
    assert len(callback_handler.start_callbacks) + len(callback_handler.end_callbacks) \
        == before + 2
    del cfg, engine
    gc.collect()
    assert [ref() for ref in refs] == [None] * 4
    assert len(callback_handler.start_callbacks) + len(callback_handler.end_callbacks) == before
    assert len(registry._REGISTRY.engines) == 0


def test_compute_hash_is_fixed_at_the_engines_creation(
        make_vllm_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_ascend.compilation.compiler import AscendCompiler

    cfg = make_vllm_config()
    first = AscendCompiler().compute_hash(cfg)
    # Another engine (fusion off) and an environment that no longer resolves at all: neither
    # is an input of the first engine's hash any more.
    off = make_vllm_config(additional_config={"ascend_compilation_config": {
        "fuse_qknorm_rope": False, "fuse_norm_quant": False, "fuse_muls_add": False}})
    assert AscendCompiler().compute_hash(off) != first
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_NZ", "7")
    with pytest.raises(ValueError, match="VLLM_ASCEND_ENABLE_NZ"):
        resolution.resolve_ascend_config({}, engine_of(cfg).facts,
                                           {"VLLM_ASCEND_ENABLE_NZ": "7"})
    assert AscendCompiler().compute_hash(cfg) == first
    compiler = AscendCompiler()
    assert compiler.compute_hash(cfg) == first and compiler.fusion_manager is engine_of(cfg).fusion
