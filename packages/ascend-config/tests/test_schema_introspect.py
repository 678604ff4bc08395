"""Reading the schema back: ``explain``, allowed-value and type wording, did-you-mean."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

import pytest
from ascend_config import (
    explain,
)
from ascend_config.schema.introspect import allowed_text, suggest, type_text
from ascend_config.schema.top import AdditionalConfig
from pydantic import Field
from pydantic.fields import FieldInfo


def _field(annotation: Any, **kwargs: Any) -> FieldInfo:
    info = FieldInfo.from_annotated_attribute(annotation, Field(None, **kwargs))
    return info


@pytest.mark.parametrize(("key", "guess"), [
    ("eplb_confg", "eplb_config"),                                 # a close sibling
    ("end_step", "scheduler_config.dyntra_lb_config.end_step"),   # the same name elsewhere
    ("DYNAMIC_EPLB", "eplb_config.dynamic_eplb"),                 # compared lower-cased
    ("dynamic_epl", "eplb_config.dynamic_eplb"),     # closer elsewhere than any sibling
    ("enabled", "xlite_graph_config.enabled"),       # exact name elsewhere beats a sibling
    ("weight_nz", "weight_nz_mode"),                 # sibling on a close call
    ("bind_irqs", "cpu_binding_config.bind_irq"),
    ("min_cpus", None), ("xyz_unrelated", None),     # nothing close enough
    ("eplb_config.expert_map_path", "eplb_config.expert_map_path"),  # a flat dotted key
    ("xlite.full_mode", "xlite_graph_config.full_mode"),
    ("sched.end_step", None),
    ("d" * 100, None), ("dynamic_eplb" + "x" * 89, None),  # longer than 100: no search
])
def test_suggest(key: str, guess: str | None) -> None:
    assert suggest(key, AdditionalConfig) == guess


def test_suggest_inside_a_section() -> None:
    from ascend_config.schema.sections import DyntraLBConfig, RlConfig

    assert suggest("end_stp", DyntraLBConfig) == "end_step"
    assert suggest("refresh", RlConfig) == "refresh"  # the top-level key of that name
    assert suggest(7, DyntraLBConfig) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("annotation", "kwargs", "allowed", "short"), [
    (int, {"lt": 5}, "an integer < 5", "int"),
    (int, {"gt": 0, "le": 9}, "an integer > 0 and <= 9", "int"),
    (float, {"ge": 0.5}, "a number >= 0.5", "float"),
    (int | str, {}, "a value", "a value"),
    (typing.Union[int, str, None], {}, "null or a value", "a value | null"),  # noqa: UP007
    (int | str | None, {}, "null or a value", "a value | null"),
    (typing.List, {}, "a list of values", "list"),  # noqa: UP006 - no item type given
    (tuple[str, ...], {}, "a list of strings", "list"),
    (list[int], {}, "a list of integers", "list"),
    (dict[str, int], {}, "a JSON object", "object"),
    (Literal["a", "b"], {}, "one of 'a', 'b'", "enum"),
    (Annotated[bool, "meta"], {}, "true or false", "bool"),
    (bytes, {}, "bytes", "bytes"),
    (str | None, {}, "null or a string", "str | null"),
])
def test_allowed_and_type_wording(annotation: Any, kwargs: dict[str, Any], allowed: str,
                                  short: str) -> None:
    info = _field(annotation, **kwargs)
    assert allowed_text(info) == allowed
    assert type_text(info) == short


def test_suggest_length_bound() -> None:
    path = "scheduler_config.dyntra_lb_config.long_req_block_threshold"
    assert suggest((path + "x" * 100)[:100], AdditionalConfig) == path
    assert suggest((path + "x" * 100)[:101], AdditionalConfig) is None


def test_suggest_cutoff_is_inclusive() -> None:
    from ascend_config.schema.sections import DyntraLBConfig

    # "end" / "enabled": 2 * 3 matching / (3 + 7) characters = exactly 0.6
    assert suggest("end", DyntraLBConfig) == "enabled"


def test_unnamed_annotation_is_written_as_text() -> None:
    from ascend_config.schema.introspect import _base_text

    assert _base_text(typing.ForwardRef("Later")) == ("ForwardRef('Later')", False)
    assert _base_text(bytes) == ("bytes", False)


def test_closest_prefers_the_first_on_a_tie() -> None:
    from ascend_config.schema.introspect import closest

    assert closest("a", ["ab", "ba"], 0.6) == (2 / 3, "ab")
    assert closest("a", ["ab", "ba"], 0.7) is None


def test_did_you_mean_prefers_the_first_of_equally_close_keys() -> None:
    from pydantic import BaseModel

    class Two(BaseModel):
        zqx_a: int = 0
        zqx_b: int = 0

    # "zqx_c" matches 4 of 5 characters of both: ratio 2*4/10 = 0.8 for each; declared first wins
    assert suggest("zqx_c", Two) == "zqx_a"


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
