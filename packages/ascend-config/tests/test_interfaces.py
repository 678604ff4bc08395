"""The smaller public surfaces, output for output: explain, schema, --env, stdin, summary,
dump file, env helpers, lazy names, schema-building helpers, hashes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from ascend_config import (
    AscendConfig,
    DeploymentFacts,
    EnvChange,
    apply_env_changes,
    envs,
    explain,
    json_schema,
    resolve,
    write_dump_config,
)
from ascend_config.cli import main


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


# --- ascend-config explain ---------------------------------------------------------------

def test_explain_env_var_with_fallback() -> None:
    assert run("explain", "VLLM_ASCEND_ENABLE_NZ") == (0, (
        "VLLM_ASCEND_ENABLE_NZ (environment variable)\n"
        "  weight NZ mode: 0 off, 1 quantized weights only, 2 also BF16/FP16 (deprecated "
        "fallback)\n"
        "  default: 1\n"
        "  allowed: 0, 1, 2\n"
        "  fallback of: weight_nz_mode (deprecated; set the key instead)\n"), "")


def test_explain_env_var_without_fallback() -> None:
    assert run("explain", "DYNAMIC_EPLB") == (0, (
        "DYNAMIC_EPLB (environment variable)\n"
        "  dynamic EPLB on model runner v1 (true or 1 enables)\n"
        "  default: 'false'\n"
        "  allowed: any text\n"), "")


def test_explain_legacy_key() -> None:
    assert run("explain", "recompute_scheduler_enable") == (0, (
        "recompute_scheduler_enable (bool | null)\n"
        "  legacy spelling of scheduler_config.recompute_scheduler_enable\n"
        "  default: null\n"
        "  allowed: null or true or false\n"
        "  deprecated: use scheduler_config.recompute_scheduler_enable\n"), "")


def test_explain_key_with_env_fallback() -> None:
    code, out, _ = run("explain", "enable_mlapo")
    assert code == 0 and out == (
        "enable_mlapo (bool)\n"
        "  MLAPO for DeepSeek W8A8\n"
        "  default: true\n"
        "  allowed: true or false\n"
        "  env fallback: VLLM_ASCEND_ENABLE_MLAPO (deprecated; used only when the key is unset)\n")


def test_explain_nested_section_lists_only_its_own_keys() -> None:
    assert run("explain", "scheduler_config.short_request_first_config") == (0, (
        "scheduler_config.short_request_first_config (object)\n"
        "  short-request-first policy\n"
        "  keys:\n"
        "    enabled = false\n"
        "    threshold = 256\n"
        "    long_max_wait_ms = 0.0\n"), "")
    code, out, _ = run("explain", "scheduler_config")
    assert code == 0
    keys = out.split("  keys:\n")[1].splitlines()
    assert keys[-1] == '    dyntra_lb_config = {}' and "    threshold = 256" not in keys


@pytest.mark.parametrize(("key", "hint"), [
    ("scheduler_config.dyntra_lb_config.end_stp", "; did you mean 'end_step'?"),
    ("scheduler_config.dyntra_lb_confg.end_step", "; did you mean 'dyntra_lb_config'?"),
    ("cpu_binding_config.min_cpu", "; did you mean 'min_cpus_per_npu'?"),
    ("dynamic_eplb.x", "; did you mean 'eplb_config.dynamic_eplb'?"),
    ("zzzz", ""), ("eplb_config.dynamic_eplb.x", ""), ("", ""),
])
def test_explain_unknown_key(key: str, hint: str) -> None:
    assert run("explain", key) == (2, "", f"error: unknown key {key!r}{hint}\n")


def test_explain_api() -> None:
    doc = explain(" scheduler_config.dyntra_lb_config.end_step ")
    assert doc is not None
    assert (doc.path, doc.type_text, doc.default, doc.is_section) == (
        "scheduler_config.dyntra_lb_config.end_step", "int", -1, False)
    shapes = explain("pa_shape_list")
    assert shapes is not None and shapes.default == [] and shapes.type_text == "list"
    legacy = explain("short_request_first_config")
    assert legacy is not None
    assert (legacy.deprecated, legacy.is_section) == (
        "scheduler_config.short_request_first_config", True)
    assert explain("scheduler_config.short_request_first_config.threshold").deprecated is None  # type: ignore[union-attr]
    assert explain("") is None and explain("eplb_config.nope") is None


# --- schema, --env, stdin ------------------------------------------------------------------

def test_schema_output_is_indented_json_schema() -> None:
    code, out, _ = run("schema")
    assert code == 0 and out == json.dumps(json_schema(), indent=2) + "\n"
    schema = json_schema()
    assert schema["title"] == "vLLM Ascend additional_config"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["enable_fused_mc2"]["env"] == "VLLM_ASCEND_ENABLE_FUSED_MC2"


def test_env_option_keeps_equals_signs_in_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_NPU_ALLOC_CONF", raising=False)
    code, out, _ = run("check", '{"rl_config": {"enabled": true}}', "--env",
                       "PYTORCH_NPU_ALLOC_CONF=a=1,expandable_segments:True")
    assert code == 0
    changes = json.loads(out)["env_changes"]
    assert ["PYTORCH_NPU_ALLOC_CONF", "a=1"] in changes


@pytest.mark.parametrize("pair", ["NOEQUALS", "=value"])
def test_env_option_needs_a_name(pair: str) -> None:
    assert run("check", "{}", "--env", pair) == (
        2, "", f"error: --env expects NAME=VALUE, got {pair!r}\n")


def test_stdin_json_is_json_not_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    # YAML would read NaN as the string "NaN"; JSON reads a number, which is refused.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
        b'  {"dump_config": {"x": NaN}}')))
    code, _, err = run("check", "-")
    assert code == 2 and "numbers must be finite" in err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"null")))
    assert run("check", "-")[0] == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"dump_config: {x: NaN}")))
    code, out, _ = run("check", "-")
    assert code == 0 and json.loads(out)["dump_config"] == {"x": "NaN"}


def test_stdin_must_be_a_byte_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    assert run("check", "-") == (2, "", "error: cannot read stdin: it is not a byte stream\n")


def test_stdin_read_errors_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config.inputs import InputError, read_stream

    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise OSError(5, "Input/output error")

    with pytest.raises(InputError) as info:
        read_stream(io.BufferedReader(Broken()), 10, "stdin")
    assert str(info.value) == "cannot read stdin: Input/output error"
    with pytest.raises(InputError) as info:
        read_stream(io.BytesIO(b"x" * 11), 10, "stdin")
    assert str(info.value) == "stdin is larger than the limit of 10 bytes"
    assert read_stream(io.BytesIO(b"x" * 10), 10, "stdin") == "x" * 10


@pytest.mark.parametrize(("name", "text", "value"), [
    ("c.yml", "weight_nz_mode: 2\n", 2), ("c.yaml", "weight_nz_mode: 0\n", 0),
    ("c.json", '{"weight_nz_mode": 2}', 2), ("c.txt", '{"weight_nz_mode": 0}', 0)])
def test_config_file_format_follows_the_suffix(tmp_path: Path, name: str, text: str,
                                               value: int) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, _ = run("check", str(path))
    assert code == 0 and json.loads(out)["weight_nz_mode"] == value


def test_invalid_json_file_message(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("weight_nz_mode: 2")
    assert run("check", str(path)) == (2, "", (
        f"error: config file {str(path)!r} is not valid JSON: Expecting value: line 1 column 1 "
        "(char 0)\n"))


# --- the resolved config -------------------------------------------------------------------

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


# --- the dump file ------------------------------------------------------------------------

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


# --- environment helpers, lazy names ----------------------------------------------------------

def test_apply_env_changes_reports_what_it_did() -> None:
    environ = {"KEEP": "1", "GONE": "x", "SAME": "v"}
    done = apply_env_changes([EnvChange("GONE", None), EnvChange("ABSENT", None),
                              EnvChange("SAME", "v"), EnvChange("NEW", "n")], environ)
    assert done == ["unset GONE", "NEW=n"]
    assert environ == {"KEEP": "1", "SAME": "v", "NEW": "n"}


def test_envs_read_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_NZ", "2")
    assert envs.read("VLLM_ASCEND_ENABLE_NZ") == 2
    assert envs.read("VLLM_ASCEND_ENABLE_NZ", {}) == 1


def test_unknown_names_are_attribute_errors() -> None:
    import ascend_config
    from ascend_config.envs import read

    with pytest.raises(AttributeError) as info:
        read("NOT_A_VAR", {})
    assert str(info.value) == "unknown Ascend environment variable 'NOT_A_VAR'"
    with pytest.raises(AttributeError) as info:
        _ = ascend_config.nothing_here  # type: ignore[attr-defined]
    assert str(info.value) == "module 'ascend_config' has no attribute 'nothing_here'"
    assert ascend_config.envs is envs
    assert ascend_config.AscendConfig is AscendConfig


# --- schema-building helpers (they run at import, so they are checked directly) -------------

def test_field_helpers() -> None:
    from ascend_config.envs import _v
    from ascend_config.schema.base import opt, sub
    from ascend_config.schema.sections import CpuBindingConfig
    from ascend_config.schema.top import _legacy

    plain = opt(3, "d")
    assert (plain.default, plain.description, plain.json_schema_extra) == (3, "d", None)
    full = opt(1, "e", env="X_ENV", allowed="one", ge=0)
    assert full.json_schema_extra == {"env": "X_ENV", "allowed": "one"}
    assert [getattr(m, "ge", None) for m in full.metadata] == [0]
    section = sub(CpuBindingConfig, "s")
    assert section.default_factory is CpuBindingConfig and section.description == "s"
    assert _legacy("a.b") == {"deprecated": True, "replacement": "a.b"}
    var = _v("N", "int", 2, "desc", int_range=(0, 3), config_key="k")
    assert (var.name, var.kind, var.default, var.description, var.int_range, var.config_key) == (
        "N", "int", 2, "desc", (0, 3), "k")


# --- hashes --------------------------------------------------------------------------------

def test_facts_hash_ignores_mapping_order_and_follows_values() -> None:
    a = DeploymentFacts(quant_description={"a": 1, "b": 2})
    b = DeploymentFacts(quant_description={"b": 2, "a": 1})
    assert a == b and hash(a) == hash(b)
    assert hash(DeploymentFacts(model_type="x")) != hash(DeploymentFacts(model_type="y"))
    odd = DeploymentFacts(quant_description={"s": {1, 2}})  # not JSON: still hashable
    assert hash(odd) == hash(DeploymentFacts(quant_description={"s": {1, 2}}))


def test_decorator_hash_ignores_dict_order() -> None:
    from dataclasses import field

    from ascend_config import config

    @config
    class WithMap:
        table: dict[str, int] = field(default_factory=dict)

    assert (WithMap(table={"a": 1, "b": 2}).compute_hash()  # type: ignore[attr-defined]
            == WithMap(table={"b": 2, "a": 1}).compute_hash())  # type: ignore[attr-defined]
