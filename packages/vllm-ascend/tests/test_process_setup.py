"""ProcessSetup owns the config published to its process: resolved once per publication."""

from __future__ import annotations

from typing import Any

import ascend_config
import pytest
from vllm_ascend.runtime import process_setup
from vllm_ascend.runtime.config_channel import (
    WORKER_INPUTS_ENV,
    publish_worker_inputs,
    resolve_published,
)
from vllm_ascend.runtime.process_setup import ProcessSetup


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """Every full resolution ProcessSetup runs (the environ it read)."""
    calls: list[dict[str, str]] = []

    def counted(environ: Any = None) -> Any:
        calls.append(dict(environ or {}))
        return resolve_published(environ)

    monkeypatch.setattr(process_setup, "resolve_published", counted)
    return calls


def _publish(env: dict[str, str], additional: dict[str, Any]) -> None:
    assert publish_worker_inputs("A2", additional, ascend_config.DeploymentFacts(soc="A2"), {},
                                 env)


def test_published_config_is_resolved_once_per_publication(
        resolutions: list[dict[str, str]]) -> None:
    env: dict[str, str] = {}
    _publish(env, {"enable_cpu_binding": False})
    setup = ProcessSetup()
    first = setup.published_config(env)
    assert first is not None and first[0] == "A2"
    assert first[1].enable_cpu_binding is False
    assert setup.published_config(env) is first and setup.published_config(env) is first
    assert len(resolutions) == 1
    _publish(env, {"enable_cpu_binding": True})  # a new publication: resolved again
    second = setup.published_config(env)
    assert second is not None and second[1].enable_cpu_binding is True
    assert len(resolutions) == 2


def test_published_config_is_none_without_a_publication(
        resolutions: list[dict[str, str]]) -> None:
    assert ProcessSetup().published_config({}) is None
    assert ProcessSetup().published_config({WORKER_INPUTS_ENV: ""}) is None
    assert resolutions == []


def test_a_damaged_channel_raises_every_time(resolutions: list[dict[str, str]]) -> None:
    from vllm_ascend.runtime.worker_inputs import WorkerInputsError

    env = {WORKER_INPUTS_ENV: "{not json"}
    setup = ProcessSetup()
    for _ in range(2):
        with pytest.raises(WorkerInputsError):
            setup.published_config(env)
    assert len(resolutions) == 2  # nothing remembered


def test_current_ascend_config_reads_the_current_owner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKER_INPUTS_ENV, raising=False)
    assert process_setup.current_ascend_config() is None
    env: dict[str, str] = {}
    _publish(env, {"enable_cpu_binding": False})
    monkeypatch.setenv(WORKER_INPUTS_ENV, env[WORKER_INPUTS_ENV])
    resolved = process_setup.current_ascend_config()
    assert resolved is not None and resolved.enable_cpu_binding is False
    process_setup.reset_process_setup()  # a fresh owner resolves again, to an equal config
    assert process_setup.current_ascend_config() == resolved


def test_config_for_is_the_engines_own_resolution_then_the_published_one(
        make_vllm_config: Any) -> None:
    from vllm_ascend.runtime.process_setup import current_process_setup

    first = make_vllm_config(enforce_eager=True, additional_config={"enable_cpu_binding": False})
    second = make_vllm_config(enforce_eager=True)  # publishes over the first
    process = current_process_setup()
    own = process.config_for(first)
    assert own is not None and own.enable_cpu_binding is False  # not the later publication
    assert process.config_for(second).enable_cpu_binding is True
    # A copy of the config (what a spawned worker holds) reads the published one.
    published = resolve_published()
    assert published is not None
    assert process.config_for(object()) == published[1] == process.config_for(second)


def test_log_once_logs_each_message_once_at_its_level(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    log = logging.getLogger("vllm_ascend.test_log_once")
    setup = ProcessSetup()
    with caplog.at_level(logging.INFO, logger=log.name):
        assert setup.log_once("decided", log, logging.INFO) is True
        assert setup.log_once("decided", log, logging.INFO) is False
        setup.warn_once("careful", log)
        setup.warn_once("careful", log)
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == log.name] == [
        (logging.INFO, "decided"), (logging.WARNING, "careful")]
    assert ProcessSetup().log_once("decided", log) is True  # a fresh process logs again


def test_state_is_one_instance_per_kind_until_the_one_reset(make_vllm_config: Any) -> None:
    from vllm_ascend.compilation.capture_tally import capture_tally_for, record_capture
    from vllm_ascend.compilation.graph_params import graph_params_for
    from vllm_ascend.config_pipeline.npu_compilation import (
        record_user_capture_settings,
        user_capture_settings,
    )
    from vllm_ascend.runtime.forward_context import ForwardStates

    setup = process_setup.current_process_setup()
    assert setup.state(ForwardStates) is setup.state(ForwardStates)
    cfg = make_vllm_config(max_num_seqs=4)
    cfg.compilation_config.max_cudagraph_capture_size = 7
    record_user_capture_settings(cfg)
    record_capture(cfg, 4, "FULL", 0.5)
    store = graph_params_for(cfg)
    states = setup.state(ForwardStates)
    assert user_capture_settings(cfg).max_size == 7 and capture_tally_for(cfg).count == 1

    process_setup.reset_process_setup()  # what a fresh process holds: none of it

    assert process_setup.current_process_setup().state(ForwardStates) is not states
    assert user_capture_settings(cfg).max_size is None
    assert capture_tally_for(cfg).count == 0
    assert graph_params_for(cfg) is not store
