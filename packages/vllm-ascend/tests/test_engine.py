"""vLLM end to end on the host-CPU platform: compiled graphs in torch.ops.ascend.*, the
Ascend fusion passes inside vLLM's pass manager, and early failure on bad Ascend config."""

from __future__ import annotations

import gc

import pytest

pytestmark = pytest.mark.timeout(400)

PROMPTS = ["w1 w2 w3 w4", "w7 w8"]


def _llm(model, **kwargs):
    from vllm import LLM

    return LLM(model=str(model), dtype="float32", max_model_len=128, max_num_seqs=4,
               max_num_batched_tokens=128, gpu_memory_utilization=0.05, seed=0, **kwargs)


def _greedy(llm):
    from vllm import SamplingParams

    outs = llm.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=0), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


FUSION_OFF = {"ascend_compilation_config": {
    "fuse_qknorm_rope": False, "fuse_norm_quant": False, "fuse_muls_add": False,
    "fuse_kv_cache_attention": False}}


def _compiled(model, tmp_path_factory, additional_config=None):
    import os

    from vllm_ascend.compilation.pass_manager import fusion_report
    from vllm_ascend.process.process_setup import reset_process_setup

    reset_process_setup()
    dump = tmp_path_factory.mktemp("dump")
    # A compile-cache hit (vLLM's or inductor's, which vLLM keeps under its cache root)
    # would skip the pass manager: compile with a fresh cache root.
    old_root = os.environ.get("VLLM_CACHE_ROOT")
    os.environ["VLLM_CACHE_ROOT"] = str(tmp_path_factory.mktemp("vllm_cache"))
    try:
        llm = _llm(model, compilation_config={"debug_dump_path": str(dump)},
                   additional_config=additional_config or {})
    finally:
        if old_root is None:
            del os.environ["VLLM_CACHE_ROOT"]
        else:
            os.environ["VLLM_CACHE_ROOT"] = old_root
    tokens = _greedy(llm)
    report = fusion_report(llm.llm_engine.vllm_config)
    del llm
    gc.collect()
    return {"tokens": tokens, "report": report, "dump": dump}


@pytest.fixture(scope="module")
def compiled_run(tiny_qwen3_weights, tmp_path_factory, ascend_cpu_platform):
    """One compiled LLM (fusion on) shared by the tests below."""
    return _compiled(tiny_qwen3_weights, tmp_path_factory)


def test_fusion_passes_ran_inside_vllm(compiled_run) -> None:
    report = compiled_run["report"]
    assert report["qknorm_rope"] >= 2  # one fused q/k norm + rope per layer
    assert report["kv_cache_attention"] >= 2  # one KV-cache write + attention call per layer
    assert set(report) >= {"norm_quant", "qknorm_rope", "muls_add"}


def test_dumped_graphs_are_written_in_ascend_ops(compiled_run) -> None:
    files = list(compiled_run["dump"].rglob("*AscendFusionPass*"))
    before = "".join(p.read_text() for p in files if ".before." in p.name)
    after = "".join(p.read_text() for p in files if ".after." in p.name)
    assert "torch.ops.ascend.rms_norm" in before and "torch.ops.ascend.add_rms_norm" in before
    assert "torch.ops.ascend.rotary_embedding" in before
    assert "vllm_ir" not in before  # IR torch wrap is off: providers traced directly
    assert "torch.ops.ascend.split_qkv_rmsnorm_rope" in after
    # vLLM's KV-cache write + attention pair became one call per layer
    assert "unified_kv_cache_update" in before and "unified_kv_cache_update" not in after
    assert "torch.ops.vllm_ascend.attention_with_kv_update" in after


def test_compiled_fused_tokens_match_eager(compiled_run, tiny_qwen3_weights) -> None:
    llm = _llm(tiny_qwen3_weights, enforce_eager=True)
    eager = _greedy(llm)
    del llm
    gc.collect()
    assert compiled_run["tokens"] == eager


def test_fusion_off_rewrites_nothing_and_keeps_the_tokens(compiled_run, tiny_qwen3_weights,
                                                          tmp_path_factory) -> None:
    off = _compiled(tiny_qwen3_weights, tmp_path_factory, FUSION_OFF)
    assert sum(off["report"].values()) == 0
    after = "".join(p.read_text() for p in off["dump"].rglob("*AscendFusionPass.after*"))
    assert "torch.ops.ascend.rms_norm" in after and "split_qkv_rmsnorm_rope" not in after
    assert "unified_kv_cache_update" in after and "attention_with_kv_update" not in after
    assert off["tokens"] == compiled_run["tokens"]


def test_bad_additional_config_fails_before_the_model_loads(tiny_qwen3, monkeypatch) -> None:
    import ascend_config
    from vllm.model_executor.model_loader import base_loader

    loaded = []
    monkeypatch.setattr(base_loader.BaseModelLoader, "load_model",
                        lambda *a, **k: loaded.append(1))
    with pytest.raises((ascend_config.AscendConfigError, ValueError)) as info:
        _llm(tiny_qwen3, enforce_eager=True,
             additional_config={"weight_nz_mode": 9, "enable_cpu_bindin": True})
    text = str(info.value)
    assert "weight_nz_mode" in text and "enable_cpu_bindin" in text
    assert "enable_cpu_binding" in text  # did-you-mean from ascend-config
    assert loaded == []


def test_an_engine_and_its_in_process_worker_resolve_the_config_once(
        tiny_qwen3_weights, monkeypatch) -> None:
    """The engine core and its worker run in this process (the demo's and the test engines'
    shape): the pipeline resolves, publishes, and the worker takes the same engine."""
    import ascend_config
    from vllm_ascend.engine import engine_of

    real = ascend_config.resolve
    calls: list[dict] = []

    def counted(*args, **kwargs):
        calls.append(dict(args[0]) if args else {})
        return real(*args, **kwargs)

    monkeypatch.setattr(ascend_config, "resolve", counted)
    llm = _llm(tiny_qwen3_weights, enforce_eager=True,
               additional_config={"enable_cpu_binding": False})
    try:
        [worker_engine] = llm.collective_rpc(lambda self: self.ascend_engine)
        [binding] = llm.collective_rpc(lambda self: list(self.ascend_binding.lines))
        assert worker_engine is engine_of(llm.llm_engine.vllm_config)
        assert binding == ["CPU binding disabled by additional_config.enable_cpu_binding"]
        assert _greedy(llm)  # it serves
    finally:
        del llm
        gc.collect()
    assert calls == [{"enable_cpu_binding": False}]
