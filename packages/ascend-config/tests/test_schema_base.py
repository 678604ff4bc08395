"""The schema's field types and helpers: path keys, text validity, plain-JSON objects, ``opt``
and ``sub``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ascend_config import (
    AscendConfigError,
    resolve,
)


@pytest.mark.parametrize("key", ["ascend_log_path", "dump_config_path",
                                 "eplb_config.expert_map_path",
                                 "eplb_config.expert_map_record_path"])
@pytest.mark.parametrize(("text", "why"), [
    ("/tmp/a\x00b.json", "contains a NUL byte"),
    ("/tmp/\udcff.json", "contains an unpaired surrogate (not valid Unicode text)"),
    ("/" + "a" * 4096 + ".json", "longer than 4096 characters"),
])
def test_path_keys_refuse_nul_surrogates_and_overlong(key: str, text: str, why: str) -> None:
    section, _, leaf = key.rpartition(".")
    config: dict[str, Any] = {section: {leaf: text}} if section else {leaf: text}
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={"DYNAMIC_EPLB": "true"})
    [problem] = info.value.problems
    assert problem.path == key and problem.message == f"must be a usable path: {why}"


@pytest.mark.parametrize("config", [
    {"dump_config": {"task": "\udcff"}},
    {"dump_config": {"\ud800": 1}},
    {"dynamic_spec_config": {"method_params": {"k": ["ok", "\udfff"]}}},
])
def test_surrogates_in_free_form_objects(config: dict[str, Any]) -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={})
    [problem] = info.value.problems
    assert "contains an unpaired surrogate" in problem.message


def test_paired_surrogates_decoded_by_json_are_fine() -> None:
    cfg = resolve(json.loads('{"dump_config": {"emoji": "\\ud83d\\ude00"}}'), environ={})
    assert json.loads(cfg.to_json())["dump_config"] == {"emoji": "\U0001F600"}


@pytest.mark.parametrize(("length", "accepted"), [(4096, True), (4097, False)])
def test_path_length(length: int, accepted: bool) -> None:
    path = "/" + "a" * (length - 1)
    if accepted:
        assert resolve({"ascend_log_path": path}, environ={}).ascend_log_path == path
    else:
        with pytest.raises(AscendConfigError) as info:
            resolve({"ascend_log_path": path}, environ={})
        assert info.value.problems[0].message == (
            "must be a usable path: longer than 4096 characters")


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
