"""to_json/from_json round trips, purity and determinism of resolve, the dump file."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ascend_config import (
    AscendConfig,
    AscendConfigError,
    DeploymentFacts,
    dump_config_file,
    resolve,
    write_dump_config,
)

CONFIGS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {}),
    ({"rl_config": {"enabled": True, "enable_batch_invariant": True},
      "dump_config": {"task": "tensor", "ünïcode": ["ok", 1.5, None]},
      "pa_shape_list": [1, 8], "rejection_sampler_config": {"posterior_threshold": 0.1 + 0.2}},
     {}),
    ({"scheduler_config": {"profiling_chunk_config": {"enabled": True}}},
     {"pipeline_parallel_size": 2, "max_num_batched_tokens": 1000}),
    ({"enable_sparse_li_c8": True}, {"index_topk": 2048, "quant_description": {
        "model.layers.1.indexer.quant_type": "INT8_DYNAMIC"}}),
]


@pytest.mark.parametrize(("config", "facts"), CONFIGS)
def test_round_trip_is_exact(config: dict[str, Any], facts: dict[str, Any]) -> None:
    cfg = resolve(config, DeploymentFacts(**facts),
                  {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    text = cfg.to_json()
    back = AscendConfig.from_json(text)
    assert back == cfg
    assert back.to_json() == text
    assert back.compute_hash() == cfg.compute_hash()
    assert back.env_changes == cfg.env_changes
    assert all(type(c).__name__ == "EnvChange" for c in back.env_changes)


def test_unset_env_change_survives_round_trip() -> None:
    cfg = resolve({"rl_config": {"enabled": True}}, environ={
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    back = AscendConfig.from_json(cfg.to_json())
    assert dict(back.env_changes)["PYTORCH_NPU_ALLOC_CONF"] is None and back == cfg


def test_from_json_rejects_garbage() -> None:
    with pytest.raises(AscendConfigError):
        AscendConfig.from_json("{not json")
    with pytest.raises(AscendConfigError) as info:
        AscendConfig.from_json(json.dumps({"weight_nz_mode": 7, "surprise": 1}))
    assert {p.path for p in info.value.problems} == {"weight_nz_mode", "surprise"}


def test_resolve_is_pure_and_deterministic() -> None:
    config = {"rl_config": {"enabled": True}, "scheduler_config": {"profiling_chunk_config": {
        "enabled": True, "min_chunk": 9000}}, "recompute_scheduler_enable": False}
    snapshot = copy.deepcopy(config)
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    facts = DeploymentFacts(pipeline_parallel_size=2)
    first = resolve(config, facts, env)
    second = resolve(config, facts, dict(env))
    assert config == snapshot and env == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert first == second and first.to_json() == second.to_json()


def test_config_is_frozen() -> None:
    cfg = resolve({})
    with pytest.raises(ValueError):
        cfg.weight_nz_mode = 0  # type: ignore[misc]
    with pytest.raises(ValueError):
        cfg.rl_config.enabled = True  # type: ignore[misc]


def test_hash_changes_with_values() -> None:
    assert resolve({}).compute_hash() != resolve({"weight_nz_mode": 0}).compute_hash()


def test_summary_and_log_dir() -> None:
    cfg = resolve({"ascend_log_path": "~/logs", "rl_config": {"enabled": True}})
    summary = cfg.summary()
    assert summary["rl"] is True and summary["weight_nz_mode"] == 0
    assert summary["env_changes"] == ["VLLM_ASCEND_ENABLE_NZ=0", "VLLM_SERVER_DEV_MODE=1"]
    assert cfg.log_dir() == Path("~/logs").expanduser()


def test_dump_config_is_written_atomically_by_explicit_call(tmp_path: Path) -> None:
    dump = {"task": "statistics", "level": "L1", "说明": "保留非 ASCII"}
    cfg = resolve({"dump_config": dump})
    target = dump_config_file(tmp_path)
    assert not target.exists()  # resolve wrote nothing
    assert write_dump_config(cfg, tmp_path) == target
    assert target == tmp_path / ".vllm_ascend" / "msprobe" / "msprobe_dump_config.json"
    text = target.read_text(encoding="utf-8")
    assert json.loads(text) == dump and "保留非 ASCII" in text and '\n  "task"' in text
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp file left


def test_dump_config_path_and_none(tmp_path: Path) -> None:
    assert write_dump_config(resolve({"dump_config_path": "/x/y.json"}), tmp_path) == Path(
        "/x/y.json")
    assert write_dump_config(resolve({}), tmp_path) is None
    assert not (tmp_path / ".vllm_ascend").exists()


def test_facts_from_file(tmp_path: Path) -> None:
    from ascend_config import FactsError

    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"soc": "A3", "architectures": ["X"],
                                "kv_connector_extra_config": {"a": 1}}))
    facts = DeploymentFacts.from_json_file(path)
    assert facts.soc == "A3" and facts.architectures == ("X",)
    assert hash(facts) == hash(DeploymentFacts.from_mapping(facts.to_dict()))
    path.write_text(json.dumps({"soc": "A9", "tp": 2, "tensor_parallel_size": "2"}))
    with pytest.raises(FactsError, match="unknown deployment fact"):
        DeploymentFacts.from_json_file(path)
    path.write_text(json.dumps({"soc": "A9", "tensor_parallel_size": "2"}))
    with pytest.raises(FactsError, match=r"soc.*tensor_parallel_size"):
        DeploymentFacts.from_json_file(path)


def test_dump_file_is_utf8_whatever_the_locale_default(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    real_fdopen = os.fdopen

    def latin1_default(fd: int, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        # What a Latin-1 locale does to a text file opened without an explicit encoding.
        if "b" not in mode and kwargs.get("encoding") is None and len(args) < 2:
            kwargs["encoding"] = "latin-1"
        return real_fdopen(fd, mode, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", latin1_default)
    dump = {"task": "保留非 ASCII"}
    target = write_dump_config(resolve({"dump_config": dump}), tmp_path)
    assert target is not None
    assert target.read_bytes().decode("utf-8") == '{\n  "task": "保留非 ASCII"\n}'
