"""The AMX permission (base.amx_permission): asked at most once per process, and before the
first vLLM CPU kernel call of every path that calls one: the host-CPU platform's process setup,
the fused attention op on its own, and the testing helpers (tests, benchmarks).

This host may lack AMX, so the SIGILL itself cannot be shown here: the order is observed through
a seam on ``torch._C._cpu._init_amx`` (the call that asks Linux) and on vLLM's kernel ops, in a
fresh interpreter where nothing has asked yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

KERNELS = ("get_scheduler_metadata", "cpu_attn_reshape_and_cache",
           "cpu_attention_with_kv_cache")

_ORDER_PROBE = """
import json
import torch

events = []
ask = torch._C._cpu._init_amx

def init_amx():
    events.append("amx")
    return ask()

torch._C._cpu._init_amx = init_amx  # the seam: installed before anything can ask

import vllm._custom_ops  # noqa: F401  (loads vLLM's CPU kernels)

for name in KERNELS:
    kernel = getattr(torch.ops._C, name)

    def call(*args, _kernel=kernel, _name=name, **kwargs):
        events.append(_name)
        return _kernel(*args, **kwargs)

    setattr(torch.ops._C, name, call)

from vllm.forward_context import override_forward_context
from vllm.plugins import load_general_plugins
from vllm_ascend.base.amx_permission import reset_amx_permission
from vllm_ascend_testing import cpu_attention as ca

phases = {}

# 1. vLLM loads the plugin (every vLLM process: API server, engine core, workers), twice.
load_general_plugins()
load_general_plugins()
phases["plugin_load"] = list(events)

from vllm.engine.arg_utils import EngineArgs

shape = ca.AttentionShape()
config = EngineArgs(model=MODEL, load_format="dummy", dtype="bfloat16",
                    max_model_len=256).create_engine_config()
gen = torch.Generator().manual_seed(0)

def run(call, layer):
    for lens in ([5, 3], [1, 1]):
        seqs = [5, 3] if lens == [5, 3] else [6, 4]
        metadata = ca.cpu_attention_metadata(lens, seqs, shape, layer.isa)
        tokens = sum(lens)
        q = torch.randn(tokens, shape.heads, shape.head, generator=gen).bfloat16()
        k = torch.randn(tokens, shape.kv_heads, shape.head, generator=gen).bfloat16()
        out = torch.empty_like(q)
        with override_forward_context(ca.attention_context("attn", layer, metadata)):
            call(q, k, k.clone(), out, ca.layer_name("attn"))

# 2. The fused op on its own: a layer made while this process had not asked.
torch._C._cpu._init_amx = lambda: True  # the layer's construction must not count
layer = ca.cpu_attention_layer(config, shape)
torch._C._cpu._init_amx = init_amx
reset_amx_permission()
events.clear()
run(ca.fused_attention, layer)
phases["fused_op"] = list(events)

# 3. The testing helpers, then vLLM's own two ops (tests and benchmarks compare against them).
reset_amx_permission()
events.clear()
run(ca.vllm_attention, ca.cpu_attention_layer(config, shape))
phases["helpers_then_vllm_ops"] = list(events)
print("RESULT " + json.dumps(phases))
"""


@pytest.fixture(scope="module")
def amx_order(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The events of each phase of ``_ORDER_PROBE`` in a fresh interpreter."""
    home = tmp_path_factory.mktemp("amx")
    env = {**os.environ, "VLLM_ASCEND_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
           "VLLM_CACHE_ROOT": str(home / "cache"), "HOME": str(home)}
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model

    model = make_tiny_model("qwen3", home / "qwen3", layers=1)
    code = f"KERNELS = {KERNELS!r}\nMODEL = {str(model)!r}\n" + _ORDER_PROBE
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    result: dict[str, list[str]] = json.loads(lines[-1][len("RESULT "):])
    return result


def _asked_once_before(events: list[str], kernels: tuple[str, ...]) -> None:
    assert events.count("amx") == 1, events
    first_kernel = min(events.index(k) for k in kernels if k in events)
    assert events.index("amx") < first_kernel, events


def test_amx_asked_once_when_vllm_loads_the_plugin(amx_order: dict[str, list[str]]) -> None:
    assert amx_order["plugin_load"] == ["amx"]


def test_amx_fused_op_asks_before_its_first_kernel_call(
    amx_order: dict[str, list[str]],
) -> None:
    events = amx_order["fused_op"]
    # the step's metadata is the caller's (vLLM's metadata builder in a model); the op's own
    # kernels are the cache write and the attention
    _asked_once_before(events, KERNELS[1:])
    # the op ran the kernels itself: both steps wrote the cache and attended
    assert events.count("cpu_attn_reshape_and_cache") == 2, events
    assert events.count("cpu_attention_with_kv_cache") == 2, events


def test_amx_testing_helpers_ask_before_vllms_kernels(amx_order: dict[str, list[str]]) -> None:
    events = amx_order["helpers_then_vllm_ops"]
    _asked_once_before(events, KERNELS)
    assert events[0] == "amx", events
    assert events.count("cpu_attention_with_kv_cache") == 2, events


@pytest.fixture
def init_amx_seam(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """``torch._C._cpu._init_amx`` answering ``seam["answer"]`` and counting its calls."""
    import torch
    from vllm_ascend.base.amx_permission import reset_amx_permission

    seam: dict[str, Any] = {"calls": 0, "answer": True}

    def init_amx() -> bool:
        seam["calls"] += 1
        return bool(seam["answer"])

    monkeypatch.setattr(torch._C._cpu, "_init_amx", init_amx)
    reset_amx_permission()
    yield seam
    reset_amx_permission()


@pytest.mark.parametrize("answer", [True, False])
def test_amx_ensure_asks_once_and_keeps_the_answer(init_amx_seam: dict[str, Any],
                                                   answer: bool) -> None:
    from vllm_ascend.base.amx_permission import ensure_amx_permission

    init_amx_seam["answer"] = answer
    assert [ensure_amx_permission() for _ in range(3)] == [answer] * 3
    assert init_amx_seam["calls"] == 1


def test_amx_reset_asks_again(init_amx_seam: dict[str, Any]) -> None:
    from vllm_ascend.base.amx_permission import ensure_amx_permission, reset_amx_permission

    ensure_amx_permission()
    reset_amx_permission()
    ensure_amx_permission()
    assert init_amx_seam["calls"] == 2


def test_amx_refused_on_an_amx_cpu_is_one_warning(init_amx_seam: dict[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    import torch
    from vllm_ascend.base.amx_permission import ensure_amx_permission

    init_amx_seam["answer"] = False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    with caplog.at_level("WARNING", logger="vllm_ascend.base.amx_permission"):
        ensure_amx_permission()
        ensure_amx_permission()
    assert [r.getMessage() for r in caplog.records if "AMX" in r.getMessage()] == [
        "this CPU has AMX but Linux refused the AMX tile state; vLLM's CPU kernels that "
        "select AMX will fail (SIGILL)"]
