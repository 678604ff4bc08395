"""vLLM finds the plugin through real entry points; VLLM_PLUGINS and VLLM_ASCEND_DEVICE decide."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs

GENERAL_PLUGINS = {
    "ascend_kv_connector",
    "ascend_model_loader",
    "ascend_service_profiling",
    "ascend_model",
}
ASCEND_CPU_PLATFORM = "vllm_ascend.platform.cpu.AscendCpuPlatform"
STOCK_CPU_PLATFORM = "vllm.platforms.cpu.CpuPlatform"

# What vLLM itself resolves in a fresh interpreter: the platform and the general plugins it
# would load (the hooks are only looked up here, `load_general_plugins` calls them).
PROBE = """
import json
from vllm.platforms import current_platform
from vllm.plugins import load_general_plugins, load_plugins_by_group
load_general_plugins()
cls = type(current_platform)
general = sorted(load_plugins_by_group("vllm.general_plugins"))
print(json.dumps({"platform": f"{cls.__module__}.{cls.__qualname__}", "general": general}))
"""


def test_entry_points_are_installed() -> None:
    platform = {ep.name: ep.value for ep in entry_points(group="vllm.platform_plugins")}
    assert platform.get("ascend") == "vllm_ascend:register"
    general = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert set(general) >= GENERAL_PLUGINS
    for name in GENERAL_PLUGINS:
        assert general[name].startswith("vllm_ascend.plugin_hooks:")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("device", "plugins", "platform", "general"),
    [
        ("cpu", None, ASCEND_CPU_PLATFORM, GENERAL_PLUGINS),
        ("auto", None, STOCK_CPU_PLATFORM, GENERAL_PLUGINS),
        # The platform entry point is named "ascend": leaving it out keeps vLLM's own CPU.
        ("cpu", "ascend_model", STOCK_CPU_PLATFORM, {"ascend_model"}),
        (
            "cpu",
            "ascend,ascend_service_profiling",
            ASCEND_CPU_PLATFORM,
            {"ascend_service_profiling"},
        ),
        ("cpu", "none", STOCK_CPU_PLATFORM, set()),
    ],
    ids=["cpu", "auto", "cpu-platform-filtered", "cpu-one-general", "cpu-none"],
)
def test_vllm_resolves_platform_and_plugins(
    run_python: Callable[..., Any],
    device: str,
    plugins: str | None,
    platform: str,
    general: set[str],
) -> None:
    run = run_python(PROBE, device=device, plugins=plugins, fresh_cache=False)
    assert run.returncode == 0, run.output[-3000:]
    assert run.result["platform"] == platform, run.output[-3000:]
    ascend_general = {name for name in run.result["general"] if name.startswith("ascend")}
    assert ascend_general == general


@pytest.mark.timeout(300)
def test_auto_mode_leaves_vllm_cpu_generation_unchanged(
    start_worker, tiny_models, ascend_log_dir: str
) -> None:
    """Installed but inactive (auto, no NPU): the same tokens as vLLM without any plugin."""
    kwargs = llm_kwargs(str(tiny_models.path("llama")), compile=False, log_dir=ascend_log_dir)
    tokens = {}
    for name, plugins in (("auto", None), ("no-plugins", "none")):
        worker = start_worker(f"discovery-{name}", device="auto", plugins=plugins)
        assert worker.request("platform")["class"] == STOCK_CPU_PLATFORM
        worker.request("load", name=name, kwargs=kwargs, timeout=240)
        outputs = worker.request(
            "generate", name=name, prompts=["Hello, my name is"], max_tokens=8
        )["outputs"]
        tokens[name] = outputs[0]["token_ids"]
        worker.close()
    assert len(tokens["auto"]) == 8
    assert tokens["auto"] == tokens["no-plugins"]
