"""How schema errors are reported and dropped, did-you-mean, type wording, CLI text output."""

from __future__ import annotations

import contextlib
import io
import json
import typing
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, Problem, resolve
from ascend_config.cli import main
from ascend_config.schema.introspect import allowed_text, suggest, type_text
from ascend_config.schema.top import AdditionalConfig
from pydantic import Field
from pydantic.fields import FieldInfo


def lines(config: Any, env: dict[str, str] | None = None, **facts: Any) -> list[str]:
    with pytest.raises(AscendConfigError) as info:
        resolve(config, DeploymentFacts(**facts), env or {})
    return info.value.lines()


# --- offending keys are dropped one by one; the rest still reaches the rules --------------

def test_bad_nested_key_keeps_its_siblings() -> None:
    # end_step is dropped; enabled stays, so DyntraLB's placement rules still run.
    found = lines({"scheduler_config": {"dyntra_lb_config": {"enabled": True, "end_step": 0}}})
    assert [line.split(":")[0] for line in found] == [
        "scheduler_config.dyntra_lb_config.end_step",
        "scheduler_config.dyntra_lb_config.enabled",
        "scheduler_config.dyntra_lb_config.enabled"]


def test_errors_in_two_sections_keep_both_sections() -> None:
    found = lines({"eplb_config": {"num_redundant_experts": -1, "dynamic_eplb": True},
                   "rl_config": {"enabled": "yes", "enable_training_consistency": True}},
                  use_mla=True)
    assert [line.split(":")[0] for line in found] == [
        "eplb_config.num_redundant_experts", "rl_config.enabled", "eplb_config.dynamic_eplb"]


def test_non_string_keys_drop_only_themselves() -> None:
    found = lines({None: 1, 7: 2, "enable_kv_nz": True,  # type: ignore[dict-item]
                   "eplb_config": {None: 1, "dynamic_eplb": True}})
    assert [line.split(":")[0] for line in found] == [
        "eplb_config.None", "None", "[7]", "eplb_config.dynamic_eplb", "enable_kv_nz",
        "enable_kv_nz"]
    assert found[1] == "None: Keys should be strings (given None; allowed: see the schema)"


def test_a_section_given_as_a_list_is_dropped_whole() -> None:
    found = lines({"scheduler_config": [1], "enable_kv_nz": True})
    assert [line.split(":")[0] for line in found] == [
        "scheduler_config", "enable_kv_nz", "enable_kv_nz"]


def test_bad_list_item_drops_the_list() -> None:
    found = lines({"pa_shape_list": [1, "x", 3], "weight_nz_mode": 9})
    assert [line.split(":")[0] for line in found] == ["pa_shape_list[1]", "weight_nz_mode"]


def test_facts_problems_have_a_message() -> None:
    assert lines({}, soc="B9") == [
        "facts.soc: invalid deployment fact (given 'B9'; allowed: one of ['A2', 'A3', 'A5', "
        "'310P', 'cpu'])"]
    with pytest.raises(AscendConfigError) as info:
        resolve({}, {"soc": "A2"}, {})  # type: ignore[arg-type]
    assert info.value.lines() == [
        "facts: wrong type of deployment facts (given {'soc': 'A2'}; allowed: a "
        "DeploymentFacts instance)"]


def test_json_path_line() -> None:
    assert lines({"eplb_config": {"expert_map_record_path": "map.txt"}}) == [
        "eplb_config.expert_map_record_path: must be a path ending in .json (given 'map.txt'; "
        "allowed: null or a .json path)"]


def test_problem_line_without_message() -> None:
    assert Problem("a.b", "1", "x", "").line() == "a.b: (given 1; allowed: x)"
    assert Problem("a", "1", "x", "m\nn").line() == "a: m n (given 1; allowed: x)"


# --- did-you-mean ----------------------------------------------------------------------------

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


# --- type and range wording --------------------------------------------------------------------

def _field(annotation: Any, **kwargs: Any) -> FieldInfo:
    info = FieldInfo.from_annotated_attribute(annotation, Field(None, **kwargs))
    return info


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


# --- CLI text output ----------------------------------------------------------------------------

def test_check_prints_indented_json_with_non_ascii_kept() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", '{"dump_config": {"说明": "保留"}}'], out, err) == 0
    text = out.getvalue()
    assert '\n  "dump_config": {\n    "说明": "保留"\n  },\n' in text
    assert json.loads(text)["dump_config"] == {"说明": "保留"}


HELP_CHECK = """\
usage: ascend-config check [-h] [--facts FACTS] [--env NAME=VALUE] [--summary]
                           source

positional arguments:
  source            a JSON/YAML file, JSON text such as '{"a": 1}', or - for
                    stdin (JSON or YAML); at most 1,048,576 bytes

options:
  -h, --help        show this help message and exit
  --facts FACTS     JSON file of deployment facts (DeploymentFacts fields; at
                    most 33,554,432 bytes)
  --env NAME=VALUE  override an environment variable for this check
                    (repeatable)
  --summary         print the short summary only
"""

HELP_TOP = """\
usage: ascend-config [-h] {check,schema,explain,env} ...

``ascend-config``: check a config, print the JSON Schema, explain a key, list
env vars. Exit codes: 0 success, 1 the output could not be written (a closed
pipe, a full disk), 2 invalid input (every problem listed on stderr).

positional arguments:
  {check,schema,explain,env}
    check               validate a config; print it resolved (exit 0) or every
                        problem (exit 2)
    schema              print the JSON Schema of additional_config
    explain             type, default, range, description of a key
    env                 every environment variable, its value and source

options:
  -h, --help            show this help message and exit
"""

HELP_EXPLAIN = """\
usage: ascend-config explain [-h] key

positional arguments:
  key         dotted key path or environment variable name

options:
  -h, --help  show this help message and exit
"""


@pytest.mark.parametrize(("argv", "text"), [
    (["--help"], HELP_TOP), (["check", "--help"], HELP_CHECK),
    (["explain", "--help"], HELP_EXPLAIN),
    (["schema", "--help"], "usage: ascend-config schema [-h]\n\noptions:\n"
                           "  -h, --help  show this help message and exit\n"),
    (["env", "--help"], "usage: ascend-config env [-h]\n\noptions:\n"
                        "  -h, --help  show this help message and exit\n")])
def test_help_text(argv: list[str], text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as info:
        main(argv, io.StringIO(), io.StringIO())
    assert info.value.code == 0 and out.getvalue() == text


def test_repeated_env_options_and_missing_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_ASCEND_ENABLE_NZ", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    out = io.StringIO()
    assert main(["check", "{}", "--env", "VLLM_ASCEND_ENABLE_NZ=2", "--env",
                 "VLLM_BATCH_INVARIANT=1", "--summary"], out, io.StringIO()) == 0
    summary = json.loads(out.getvalue())
    assert (summary["weight_nz_mode"], summary["batch_invariant"]) == (0, True)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as info:
        main([], io.StringIO(), io.StringIO())
    assert info.value.code == 2


# --- schema error lines ----------------------------------------------------------------------

@pytest.mark.parametrize(("config", "line"), [
    ({"zzzz_unrelated": 1},
     "zzzz_unrelated: unknown key (given 1; allowed: a key listed by `ascend-config explain`)"),
    ({"scheduler_config": {"dyntra_lb_config": {"end_stp": 1}}},
     "scheduler_config.dyntra_lb_config.end_stp: unknown key (given 1; allowed: did you mean "
     "'end_step'?)"),
    ({"short_request_first_config": {"thresold": 1}},
     "short_request_first_config.thresold: unknown key (given 1; allowed: did you mean "
     "'threshold'?)"),
    ({"eplb_config": [1]}, "eplb_config: must be a JSON object (given [1]; allowed: a JSON "
     "object)"),
    ({"dump_config": "x"},
     "dump_config: must be a JSON object (given 'x'; allowed: null or a JSON object)"),
    ({"enable_fused_mc2": True},
     "enable_fused_mc2: must be an integer (given True; allowed: 0 or 1)"),
    ({"weight_nz_mode": 1.0},
     "weight_nz_mode: must be an integer (given 1.0; allowed: 0, 1 or 2)"),
    ({"mega_moe_max_tokens": 0},
     "mega_moe_max_tokens: Input should be greater than 0 (given 0; allowed: an integer > 0)"),
    ({"ascend_compilation_config": {"fuse_kv_cache_attention": "yes"}},
     "ascend_compilation_config.fuse_kv_cache_attention: Input should be a valid boolean "
     "(given 'yes'; allowed: true or false)"),
])
def test_schema_error_lines(config: dict[str, Any], line: str) -> None:
    assert lines(config) == [line]


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


# --- bounded rendering of values and paths ------------------------------------------------------

def test_short_repr_bounds() -> None:
    from ascend_config.errors import short_repr

    fits = {"x" * 30: 1, "y" * 36: 1}
    assert short_repr(fits) == repr(fits) and len(repr(fits)) == 80
    long = {"x" * 30: 1, "y" * 37: 1}
    assert short_repr(long) == repr(long)[:77] + "..."

    class Hostile(list):  # type: ignore[type-arg]
        # reprlib dispatches on the class name and calls len() itself, unguarded
        def __len__(self) -> int:
            raise RuntimeError("no")

    Hostile.__name__ = "list"

    class Multiline:
        def __repr__(self) -> str:
            return "a\nb\u2028"

    assert short_repr(Hostile()) == "<list>"
    assert short_repr(Multiline()) == "a\\nb\\u2028"


def test_render_path() -> None:
    from ascend_config.errors import render_path

    assert render_path(["a", 0, "b c", 1, "d"]) == "a[0].'b c'[1].d"
    assert render_path([0, "x"]) == "[0].x"
    assert render_path([]) == "<additional_config>"
    assert render_path(["a\nb"]) == "'a\\nb'"


@pytest.mark.parametrize(("field", "limit"), [("path", 120), ("allowed", 160),
                                              ("message", 160)])
def test_problem_parts_are_clipped(field: str, limit: int) -> None:
    from ascend_config.errors import make_problem

    parts = {"path": "p", "allowed": "a", "message": "m"}
    parts[field] = "z" * limit
    problem = make_problem(parts["path"], 1, parts["allowed"], parts["message"])
    assert getattr(problem, field) == "z" * limit
    parts[field] = "z" * (limit + 1)
    problem = make_problem(parts["path"], 1, parts["allowed"], parts["message"])
    assert getattr(problem, field) == "z" * (limit - 3) + "..."


def test_problem_line_is_clipped_at_300() -> None:
    # 100 + ": " + 20 + " (given 1; allowed: " + 157 + ")" = 300 characters: kept whole
    fits = Problem("p" * 100, "1", "a" * 157, "m" * 20)
    assert len(fits.line()) == 300 and fits.line().endswith("a)")
    over = Problem("p" * 100, "1", "a" * 158, "m" * 20)
    assert over.line() == fits.line()[:297] + "..."
    short = Problem("p", "1", "a" * 100, "m")
    assert short.line() == "p: m (given 1; allowed: " + "a" * 100 + ")"


# --- did-you-mean boundaries --------------------------------------------------------------------

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


@pytest.mark.parametrize(("source", "first_line"), [
    ("[1]", "1 problem in the Ascend configuration:"),
    (" null ", None), ('  {"weight_nz_mode": 0}', None),
    ("nonexistent.json", "error: cannot read config file 'nonexistent.json': No such file or "
                         "directory"),
])
def test_inline_json_or_file(source: str, first_line: str | None) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", source], out, err)
    assert code == (0 if first_line is None else 2)
    if first_line:
        assert err.getvalue().splitlines()[0] == first_line


# --- more edges ---------------------------------------------------------------------------------

def test_stdin_parse_errors_name_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    for data, expected in ((b'{"a": }', "error: stdin is not valid JSON: Expecting value: "
                                        "line 1 column 7 (char 6)\n"),
                           (b"a: [1,\n", "error: stdin is not valid YAML: ")):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
        out, err = io.StringIO(), io.StringIO()
        assert main(["check", "-"], out, err) == 2
        assert err.getvalue().startswith(expected) and err.getvalue().count("\n") == 1


def test_inline_text_of_exactly_the_limit_is_read() -> None:
    from ascend_config.limits import MAX_CONFIG_BYTES

    head, tail = '{"dump_config": {"p": "', '"}}'
    text = head + "x" * (MAX_CONFIG_BYTES - len(head) - len(tail)) + tail
    assert len(text) == MAX_CONFIG_BYTES
    out = io.StringIO()
    assert main(["check", text, "--summary"], out, io.StringIO()) == 0


def test_missing_command_names_it() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        main([], io.StringIO(), io.StringIO())
    assert err.getvalue().splitlines()[-1] == (
        "ascend-config: error: the following arguments are required: command")


def test_envs_name_is_resolved_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import ascend_config
    import ascend_config.envs as envs_module

    monkeypatch.delattr(ascend_config, "envs")  # as in a fresh interpreter
    assert ascend_config.envs is envs_module


def test_decorated_hash_emits_no_warnings() -> None:
    import warnings

    from ascend_config import config

    @config(frozen=True)
    class Small:
        size: int = 1
        name: str = "n"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        digest = Small().compute_hash()  # type: ignore[attr-defined]
    assert digest != Small(size=2).compute_hash()  # type: ignore[attr-defined]


def test_closest_prefers_the_first_on_a_tie() -> None:
    from ascend_config.schema.introspect import _closest

    assert _closest("a", ["ab", "ba"], 0.6) == (2 / 3, "ab")
    assert _closest("a", ["ab", "ba"], 0.7) is None


def test_table_cell_text() -> None:
    from ascend_config.reference_doc import _cell

    assert _cell("a|b\nc") == "a\\|b c"


def test_flat_facts_mapping_over_the_limit() -> None:
    from ascend_config import FactsError
    from ascend_config.limits import MAX_FACTS_VALUES

    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({"quant_description": {
            f"k{i}": 0 for i in range(MAX_FACTS_VALUES + 1)}})
    assert str(info.value).endswith("; more than 1000000 keys and list items")


def test_odd_keys_deep_in_a_section_drop_only_themselves() -> None:
    found = lines({"eplb_config": {1.5: 1, "dynamic_eplb": True}})  # type: ignore[dict-item]
    assert [line.split(":")[0] for line in found] == [
        "eplb_config.'1.5'", "eplb_config.dynamic_eplb"]
    found = lines({"dump_config": {1: 2}, "enable_kv_nz": True})  # type: ignore[dict-item]
    assert [line.split(":")[0] for line in found] == [
        "dump_config[1].'[key]'", "enable_kv_nz", "enable_kv_nz"]


@pytest.mark.parametrize(("text", "accepted"), [
    # 31 levels, an empty list closes back to 31, then two more levels: 33 in all
    ("[" * 31 + "[], [[]]" + "]" * 31, False),
    # three empty lists beside a 32-deep chain: still 33 with the outer list
    ("[[], [], [], " + "[" * 32 + "]" * 32 + "]", False),
    ("[[], [], [], " + "[" * 31 + "]" * 31 + "]", True),
])
def test_yaml_depth_after_closing(text: str, accepted: bool) -> None:
    from ascend_config.inputs import InputError, parse_yaml_text

    if accepted:
        assert parse_yaml_text(text, "t")[0] == []
    else:
        with pytest.raises(InputError, match="nested deeper than 32 levels"):
            parse_yaml_text(text, "t")


@pytest.mark.parametrize(("key", "shown"), [
    (None, "None"), (1.5, "'1.5'"), (Decimal("1.0"), '"Decimal(\'1.0\')"')])
def test_a_non_string_key_keeps_the_other_problems(key: object, shown: str) -> None:
    # pydantic names a None/1.5 key by str() and a Decimal key by repr(); either way only that
    # key is dropped, so the EPLB rule still sees eplb_config and reports it too.
    found = lines({key: "x", "eplb_config": {"dynamic_eplb": True}})
    assert found[0] == f"{shown}: Keys should be strings (given {key!r}; allowed: see the schema)"
    assert found[1].startswith("eplb_config.dynamic_eplb: dynamic EPLB on model runner v1 needs")
    assert len(found) == 2


def test_non_string_keys_do_not_count_as_given_paths() -> None:
    # Model runner v2 lists legacy EPLB fields given by name; a non-string inner key is only
    # a schema problem, and a non-string top-level key does not hide later sections.
    found = lines({"eplb_config": {1: "x"}}, use_model_runner_v2=True)
    assert [line.split(":")[0] for line in found] == ["eplb_config[1]"]
    found = lines({None: 1, "eplb_config": {"load_collection_phase": "all"}})
    assert [line.split(":")[0] for line in found] == ["None",
                                                      "eplb_config.load_collection_phase"]


def test_did_you_mean_prefers_the_first_of_equally_close_keys() -> None:
    from pydantic import BaseModel

    class Two(BaseModel):
        zqx_a: int = 0
        zqx_b: int = 0

    # "zqx_c" matches 4 of 5 characters of both: ratio 2*4/10 = 0.8 for each; declared first wins
    assert suggest("zqx_c", Two) == "zqx_a"


def test_free_form_object_problem_names_the_inner_path_only_when_there_is_one() -> None:
    # A bad key of dump_config itself is at its root: no "(at ...)" part.
    assert lines({"dump_config": {"\ud800": 1}}) == [
        "dump_config: contains an unpaired surrogate (not valid Unicode text) "
        "(given {'\\ud800': 1}; allowed: null or a JSON object)"]
    assert lines({"dump_config": {"a": [float("nan")]}}) == [
        "dump_config: numbers must be finite (no NaN or Infinity) (at a[0]) "
        "(given {'a': [nan]}; allowed: null or a JSON object)"]


def test_a_non_string_key_problem_says_see_the_schema() -> None:
    assert lines({None: 1}) == ["None: Keys should be strings (given None; allowed: see the "
                                "schema)"]


def test_dotted_eplb_key_is_named_whole_on_model_runner_v2() -> None:
    assert lines({"eplb_config": {"x.y": 1}}, use_model_runner_v2=True) == [
        "eplb_config.'x.y': unknown key (given 1; allowed: a key listed by `ascend-config "
        "explain`)",
        "eplb_config: model runner v2 uses vLLM's --enable-eplb; legacy EPLB fields given "
        "(given 'x.y'; allowed: only load_collection_phase)"]


def test_expert_map_path_that_is_a_directory_is_refused(tmp_path: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "map.json").mkdir()  # readable, but no file
    assert lines({"eplb_config": {"expert_map_path": "map.json"}}) == [
        "eplb_config.expert_map_path: file not found or not readable (given 'map.json'; "
        "allowed: a readable .json file)"]


def test_sparse_kv_offload_with_sfa_c8_line() -> None:
    assert lines({"sparse_kv_offload_config": {"enabled": True}, "enable_sparse_sfa_c8": True},
                 index_topk=2048, kv_role="kv_consumer") == [
        "sparse_kv_offload_config.enabled: not implemented together with SFA C8 (given True; "
        "allowed: false with enable_sparse_sfa_c8)"]


def test_shape_problems_name_where_and_what() -> None:
    from ascend_config.limits import MAX_CONFIG_CHARS, MAX_DEPTH

    deep: dict[str, Any] = {"v": 1}
    for _ in range(MAX_DEPTH):
        deep = {"k": deep}  # MAX_DEPTH + 1 levels inside dump_config
    assert lines({"dump_config": deep}) == [
        f"dump_config: nested deeper than {MAX_DEPTH} levels (given {{'k': {{'k': {{'k': "
        f"{{...}}}}}}}}; allowed: at most {MAX_DEPTH} levels of objects and lists)"]
    # Too much text is a property of the whole config: no inner path is named.
    found = lines({"dump_config": {"a": "x" * (MAX_CONFIG_CHARS + 1)}})
    assert len(found) == 1
    assert found[0].startswith(f"<additional_config>: more than {MAX_CONFIG_CHARS} characters "
                               "of text (given {'dump_config': {'a': 'xxx")


def test_a_derivation_bug_is_reported_as_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config import resolver

    def bad_rule(ctx: Any) -> None:
        ctx.derived["num_head_replica"] = "many"  # not an int: AscendConfig refuses it

    monkeypatch.setattr(resolver, "RULES", (*resolver.RULES, bad_rule))
    found = lines({})
    assert len(found) == 1
    assert found[0].startswith("<resolved>: internal derivation error (given '1 validation "
                               "error for Asce")
    assert found[0].endswith("; allowed: a valid config)")


def test_free_form_objects_name_the_type_that_is_no_json_and_keep_nul_text() -> None:
    assert lines({"dump_config": {"a": {1, 2}}}) == [
        "dump_config: set is not a JSON value (at a) (given {'a': {1, 2}}; allowed: null or a "
        "JSON object)"]
    assert lines({"dump_config": {"a": (1, 2)}}) == [
        "dump_config: tuple is not a JSON value (at a) (given {'a': (1, 2)}; allowed: null or a "
        "JSON object)"]
    # A NUL character is valid JSON text (only paths refuse it).
    assert resolve({"dump_config": {"task": "a\x00b"}}, DeploymentFacts(), {}).dump_config == {
        "task": "a\x00b"}


@pytest.mark.parametrize("name", ["quant_description", "kv_connector_extra_config"])
def test_mapping_facts_are_frozen_copies(name: str) -> None:
    given = {"a": "b"}
    facts = DeploymentFacts(**{name: given})
    given["a"] = "changed"  # the caller's dict is not shared
    held = getattr(facts, name)
    assert dict(held) == {"a": "b"}
    with pytest.raises(TypeError):
        held["x"] = "y"  # read-only
    assert hash(facts) == hash(DeploymentFacts(**{name: {"a": "b"}}))
