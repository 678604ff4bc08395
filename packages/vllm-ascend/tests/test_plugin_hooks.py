"""General-plugin hooks: idempotent, never failing, doing their work on Ascend platforms."""

from __future__ import annotations

import logging
from pathlib import Path

from vllm_ascend import plugin_hooks
from vllm_ascend.process.process_setup import reset_process_setup


def test_a_failing_hook_only_warns_and_runs_once(caplog) -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise OSError("disk on fire")

    hook = plugin_hooks._once_and_safe(broken)
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.plugin_hooks"):
        hook()
        hook()
    assert calls == [1]
    assert "a plugin hook failed: OSError: disk on fire" in caplog.text
    reset_process_setup()


def test_hooks_failing_for_one_cause_warn_once(caplog) -> None:
    reset_process_setup()

    def first() -> None:
        raise RuntimeError("no NPU runtime")

    def second() -> None:
        raise RuntimeError("no NPU runtime")

    def third() -> None:
        raise RuntimeError("another cause")

    with caplog.at_level(logging.WARNING, logger="vllm_ascend.plugin_hooks"):
        for fn in (first, second, third):
            plugin_hooks._once_and_safe(fn)()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["a plugin hook failed: RuntimeError: no NPU runtime",
                        "a plugin hook failed: RuntimeError: another cause"]
    reset_process_setup()


def test_hooks_register_extensions_and_profiling(ascend_cpu_platform, monkeypatch,
                                                  tmp_path) -> None:
    from vllm import ModelRegistry
    from vllm_ascend.observability import service_profiling

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    reset_process_setup()
    assert plugin_hooks.active_ascend_soc() == "cpu"
    try:
        for hook in (plugin_hooks.register_connector, plugin_hooks.register_model_loader,
                     plugin_hooks.register_service_profiling, plugin_hooks.register_model):
            hook()
            hook()
        assert "AscendTestForCausalLM" in ModelRegistry.get_supported_archs()
        written = service_profiling.config_path("0.32.0").read_text()
        # The test extension's scheduler and runtime classes are profiled too.
        assert "ascend_test_ext:TestScheduler.schedule" in written
    finally:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.model_executor import model_loader

        ModelRegistry.models.pop("AscendTestForCausalLM", None)
        KVConnectorFactory._registry.pop("AscendTestConnector", None)
        model_loader._LOAD_FORMAT_TO_MODEL_LOADER.pop("ascend_test_format", None)
        reset_process_setup()
