"""ProcessSetup owns what is per process: the config published to it (resolved once per
publication), log-once keys. What is per engine is on the engine (tests/test_engine_registry.py)."""

from __future__ import annotations

from typing import Any

import ascend_config
import pytest
from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV, publish_worker_inputs
from vllm_ascend.process import process_setup
from vllm_ascend.process.process_setup import ProcessSetup
from vllm_ascend.process.resolve_step import resolve_published


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
    first = setup.published(env)
    assert first is not None and first.soc == "A2"
    assert first.config.enable_cpu_binding is False
    assert setup.published(env) is first and setup.published_config(env) == first[:2]
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
    from vllm_ascend.base.worker_inputs import WorkerInputsError

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


def test_the_owner_holds_nothing_per_engine() -> None:
    from dataclasses import fields

    names = {f.name for f in fields(ProcessSetup)}
    assert names == {"adjustments", "log_dir", "batch_invariance", "cpu_binding", "done_for",
                     "soc_detection", "warned", "roots", "hooks_run", "_published"}
