"""Import cost and boundaries, measured in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = ("torch", "vllm", "torch_npu")


def _run(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)


def _importtime_us(stderr: str, module: str) -> int:
    for line in stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module and parts[1].isdigit():
            return int(parts[1])
    raise AssertionError(f"{module} not in -X importtime output")


@pytest.mark.child_process
def test_import_is_cheap_and_loads_no_torch_or_vllm() -> None:
    result = _run("import ascend_config", "-X", "importtime")
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert not {m for m in imported if m.split(".")[0] in FORBIDDEN}
    assert "pydantic" not in imported
    assert _importtime_us(result.stderr, "ascend_config") < 150_000


@pytest.mark.child_process
@pytest.mark.parametrize("module", ["ascend_config.envs", "ascend_config.facts",
                                    "ascend_config.inputs", "ascend_config.limits",
                                    "ascend_config.errors"])
def test_stdlib_only_modules_do_not_import_pydantic(module: str) -> None:
    code = (f"import sys, json, {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'pydantic_core', 'yaml', 'torch', 'vllm'))))")
    assert json.loads(_run(code).stdout) == []


@pytest.mark.child_process
def test_full_resolve_path_loads_no_torch_or_vllm() -> None:
    code = ("import sys, json, ascend_config as ac; ac.resolve({}); ac.json_schema(); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(json.loads(_run(code).stdout))
    assert "pydantic" in loaded and not loaded & set(FORBIDDEN)


@pytest.mark.child_process
def test_import_has_no_side_effects() -> None:
    code = ("import os, json; before = dict(os.environ); import ascend_config as ac; "
            "ac.resolve({'rl_config': {'enabled': True}}); print(json.dumps(before == "
            "dict(os.environ)))")
    assert json.loads(_run(code).stdout) is True


def test_lazy_namespace() -> None:
    import ascend_config

    assert set(ascend_config.__all__) <= set(dir(ascend_config))
    with pytest.raises(AttributeError):
        _ = ascend_config.not_a_name  # type: ignore[attr-defined]


def test_lazy_envs_is_the_module_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import ascend_config

    module = importlib.import_module("ascend_config.envs")
    # Importing the submodule binds it on the package; unbind it so the PEP 562 hook answers.
    monkeypatch.delattr(ascend_config, "envs")
    assert ascend_config.envs is module
    assert ascend_config.AscendConfigError is importlib.import_module(
        "ascend_config.errors").AscendConfigError
