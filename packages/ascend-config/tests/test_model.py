"""``AscendConfig``: to_json/from_json round trips, hashes, summaries, the dump file."""

from __future__ import annotations

import json
import os
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
from hypothesis import given
from hypothesis import strategies as st

from .fuzz_checks import check_error
from .fuzz_inputs import FUZZ, JSON

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


@FUZZ
@given(text=st.one_of(st.text(max_size=300), st.builds(json.dumps, JSON),
                      st.builds(lambda n: "[" * n, st.integers(0, 3000))))
def test_from_json(text: str) -> None:
    try:
        cfg = AscendConfig.from_json(text)
    except AscendConfigError as exc:
        check_error(exc)
        return
    assert AscendConfig.from_json(cfg.to_json()) == cfg  # e.g. "{}": every default


def test_payload_error_lines() -> None:
    from ascend_config import AscendConfig

    with pytest.raises(AscendConfigError) as info:
        AscendConfig.from_json('{"weight_nz_mode": 7, "soc": 1}')
    assert info.value.lines() == [
        "weight_nz_mode: Input should be 0, 1 or 2 (given 7; allowed: a value written by "
        "AscendConfig.to_json)",
        "soc: Input should be a valid string (given 1; allowed: a value written by "
        "AscendConfig.to_json)"]
    with pytest.raises(ValueError, match="must be valid text: contains an unpaired surrogate"):
        AscendConfig(soc="\udcff")


def test_summary_of_a_busy_config() -> None:
    config = {
        "ascend_compilation_config": {"enable_static_kernel": True, "fuse_muls_add": False},
        "xlite_graph_config": {"enabled": True}, "enable_fused_mc2": 1,
        "eplb_config": {"dynamic_eplb": True}, "enable_cpu_binding": False,
        "finegrained_tp_config": {"lmhead_tensor_parallel_size": 2},
        "scheduler_config": {"enable_balance_scheduling": True,
                             "batch_job_sched_config": {"enabled": True},
                             "short_request_first_config": {"enabled": False}},
        "rl_config": {"enabled": True, "enable_batch_invariant": True},
        "ascend_log_path": "/var/log/ascend",
    }
    cfg = resolve(config, DeploymentFacts(is_moe=True, data_parallel_size=2),
                  {"DYNAMIC_EPLB": "true", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert cfg.summary() == {
        "soc": "A2",
        "fusion_passes": ["fuse_norm_quant", "fuse_qknorm_rope", "fuse_kv_cache_attention"],
        "npugraph_ex": True, "static_kernel": True, "xlite": True, "weight_nz_mode": 0,
        "fused_mc2": 1, "eplb": "dynamic",
        "finegrained_tp": {"lmhead_tensor_parallel_size": 2},
        "scheduler": ["balance", "batch_job"], "rl": True, "batch_invariant": True,
        "cpu_binding": False, "log_dir": "/var/log/ascend",
        "env_changes": ["VLLM_ASCEND_ENABLE_NZ=0", "unset PYTORCH_NPU_ALLOC_CONF",
                        "VLLM_BATCH_INVARIANT=1", "VLLM_SERVER_DEV_MODE=1",
                        "HCCL_DETERMINISTIC=strict", "LCCL_DETERMINISTIC=1"],
        "warnings": 1,
    }


@pytest.mark.parametrize(("section", "label"), [
    ({"short_request_first_config": {"enabled": True}}, ["short_request_first"]),
    ({"recompute_scheduler_enable": True}, ["recompute"]),
])
def test_summary_scheduler_labels(section: dict[str, Any], label: list[str]) -> None:
    facts = DeploymentFacts(kv_role="kv_consumer" if "recompute_scheduler_enable" in section
                            else None)
    summary = resolve({"scheduler_config": section}, facts, {}).summary()
    assert (summary["scheduler"], summary["eplb"], summary["cpu_binding"]) == (
        label, "static", True)


def test_summary_profiling_chunk_label() -> None:
    cfg = resolve({"scheduler_config": {"profiling_chunk_config": {"enabled": True}}},
                  DeploymentFacts(pipeline_parallel_size=2), {})
    assert cfg.summary()["scheduler"] == ["profiling_chunk"]


@pytest.mark.parametrize(("name", "expected"), [
    (".model.mtp.", True), ("model.mtp", True), ("model.mtp.indexer", True),
    ("model.mtpx", False), ("model.layers.4", True), ("layers.4.self_attn", True),
    ("model.layers.40", False), ("mtp", False), ("model.mtpX", False)])
def test_li_c8_layer_names_without_an_index(name: str, expected: bool) -> None:
    quant = {"model.mtp.indexer.quant_type": "INT8_DYNAMIC",
             "model.layers.4.self_attn.indexer.wq_b_weight": "W8A8_MXFP8"}
    cfg = resolve({"enable_sparse_li_c8": True},
                  DeploymentFacts(index_topk=2048, quant_description=quant), {})
    assert cfg.sparse_li_c8_layer_names == ("model.layers.4.self_attn", "model.mtp")
    assert cfg.is_sparse_li_c8_layer(name) is expected


def test_config_hash_is_sha256_of_the_json() -> None:
    import hashlib

    cfg = resolve({"dump_config": {"说明": "x"}}, environ={})
    assert cfg.compute_hash() == hashlib.sha256(cfg.to_json().encode()).hexdigest()


def test_dump_written_twice_through_a_temporary_file_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moves: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        moves.append((os.fspath(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    target = write_dump_config(resolve({"dump_config": {"说明": 1}}, environ={}), tmp_path)
    again = write_dump_config(resolve({"dump_config": {"n": 2}}, environ={}), tmp_path)
    assert target == again and target is not None
    assert json.loads(target.read_text(encoding="utf-8")) == {"n": 2}
    for src, dst in moves:
        tmp = Path(src)
        assert dst == str(target) and tmp.parent == target.parent
        assert tmp.name.startswith(target.name + ".") and tmp.name.endswith(".tmp")
    assert len(moves) == 2


def test_dump_failure_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_dump_config(resolve({"dump_config": {"a": 1}}, environ={}), tmp_path)
    assert list((tmp_path / ".vllm_ascend" / "msprobe").iterdir()) == []


def test_dump_text_is_utf8_with_non_ascii_kept(tmp_path: Path) -> None:
    target = write_dump_config(resolve({"dump_config": {"说明": "保留"}}, environ={}), tmp_path)
    assert target is not None
    assert target.read_bytes() == '{\n  "说明": "保留"\n}'.encode()
