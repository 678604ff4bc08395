"""Host-CPU compilation settings and inductor's inlining of the ascend ops after the passes."""

from __future__ import annotations


def test_host_cpu_compiles_one_graph_with_inductors_own_precision(make_vllm_config) -> None:
    cc = make_vllm_config().compilation_config
    assert cc.splitting_ops == []  # one graph, as stock vLLM CPU compiles it
    # Not rounded at every low-precision op of the model (the ascend ops round themselves):
    # fused intermediates stay float32, as in stock vLLM's compiled graph.
    assert "emulate_precision_casts" not in cc.inductor_compile_config
    assert cc.inductor_compile_config["realize_cpu_opcount_threshold"] == 100
    eager = make_vllm_config(enforce_eager=True).compilation_config
    assert "emulate_precision_casts" not in eager.inductor_compile_config
    assert "realize_cpu_opcount_threshold" not in eager.inductor_compile_config
