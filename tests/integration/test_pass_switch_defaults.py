"""ascend-graph takes its pass switches as plain arguments; their defaults are ascend-config's."""

from __future__ import annotations

import inspect

import ascend_config
import ascend_graph
from ascend_graph.manager import PASS_SWITCHES, SWITCH_DEFAULTS, GraphFusionPassManager


def test_switch_defaults_agree_with_ascend_config() -> None:
    assert ascend_config.compilation_defaults() == SWITCH_DEFAULTS
    resolved = ascend_config.resolve({}).ascend_compilation_config
    assert {key: getattr(resolved, key) for key in SWITCH_DEFAULTS} == SWITCH_DEFAULTS


def test_manager_constructor_defaults_agree_with_ascend_config() -> None:
    parameters = inspect.signature(GraphFusionPassManager).parameters
    defaults = {key: parameters[key].default for key in SWITCH_DEFAULTS}
    assert defaults == ascend_config.compilation_defaults()


def test_every_switch_is_a_key_of_the_compilation_config() -> None:
    fields = ascend_config.resolve({}).ascend_compilation_config.model_dump()
    assert set(PASS_SWITCHES.values()) <= set(fields)


def test_resolved_switches_configure_the_manager() -> None:
    cfg = ascend_config.resolve({"ascend_compilation_config": {"fuse_qknorm_rope": False}})
    manager = GraphFusionPassManager.from_switches(cfg.ascend_compilation_config.pass_switches())
    assert "qknorm_rope" not in manager.enabled
    assert {"norm_quant", "muls_add", "noop_elimination"} <= set(manager.enabled)
    backend = ascend_graph.make_backend(cfg.ascend_compilation_config.pass_switches())
    assert set(backend.report) == {
        "norm_quant", "qknorm_rope", "muls_add", "noop_elimination", "allgather_chunk_cleanup",
        "kv_cache_attention",
    }
    assert sum(backend.report.values()) == 0
    # on by default, but without vLLM's attention op handles the attention pass cannot run
    assert "kv_cache_attention" not in manager.enabled
