"""ProcessSetup owns what is per process (log-once keys, adjustments); it resolves no config:
the published config is the engine registry's (tests/test_engine_registry.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_ascend.process.process_setup import ProcessSetup


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
                     "soc_detection", "warned", "roots", "hooks_run"}


def test_no_module_of_process_resolves_a_config() -> None:
    import vllm_ascend.process as process

    for module in Path(process.__file__).parent.glob("*.py"):
        text = module.read_text(encoding="utf-8")
        assert "resolve(" not in text.replace("_resolve(", ""), module.name
        assert "engine.resolution" not in text and "resolve_published" not in text, module.name
