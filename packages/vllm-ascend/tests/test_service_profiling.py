"""Service-profiling symbols: written once per vLLM version, atomically, never over edits."""

from __future__ import annotations

import importlib
import logging
import threading
from pathlib import Path

import pytest
import yaml
from vllm_ascend.observability import service_profiling as sp
from vllm_ascend.observability.service_profiling_symbols import REQUIRED_GROUPS


def _resolve(symbol: str) -> object:
    module, _, qualname = symbol.partition(":")
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_config_dir_follows_xdg(tmp_path) -> None:
    assert sp.config_dir({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "vllm_ascend"
    assert sp.config_dir({"HOME": "/h"}) == sp.Path("/h/.config/vllm_ascend")


def _written(tmp_path, version: str = "0.32.0", **kwargs) -> list[dict]:
    path = sp.generate_service_profiling_config(
        version, environ={"XDG_CONFIG_HOME": str(tmp_path)}, **kwargs)
    return yaml.safe_load(path.read_text())


def test_generated_file_lists_only_resolvable_symbols(tmp_path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    path = sp.generate_service_profiling_config("0.32.0", environ=env)
    assert path == tmp_path / "vllm_ascend" / "service_profiling_symbols.0.32.0.yaml"
    entries = yaml.safe_load(path.read_text())
    symbols = [e["symbol"] for e in entries]
    assert "vllm.v1.core.sched.scheduler:Scheduler.schedule" in symbols
    assert "vllm_ascend.distributed.moe_comm:select_moe_comm_method" in symbols
    assert "vllm_ascend.compilation.pass_manager:AscendFusionPass.__call__" in symbols
    # Candidates absent from this vLLM are left out: an alias, not a class, since 0.12 ...
    assert not any("AsyncLLMEngine" in s for s in symbols)
    # ... and a method EagleProposer inherits (its base class's entry is written instead).
    assert "vllm.v1.spec_decode.eagle:EagleProposer.propose" not in symbols
    assert ("vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.propose"
            in symbols)
    index = sp.SourceIndex()
    for entry in entries:
        concrete = list(index.matches(entry["symbol"]))
        assert concrete, entry["symbol"]
        assert callable(_resolve(concrete[0])), concrete[0]
        assert set(entry) <= {"symbol", "domain", "name", "handler", "min_version",
                              "max_version", "attributes"}
        for attribute in entry.get("attributes", []):
            assert set(attribute) == {"name", "expr"} and attribute["expr"]
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]


def test_written_file_covers_every_group_with_the_installed_vllm(tmp_path) -> None:
    entries = _written(tmp_path)
    group_of = {(s.symbol, s.name): s.group for s in (*sp.VLLM_SYMBOLS, *sp.OWN_SYMBOLS)}
    written_groups = {group_of[e["symbol"], e["name"]] for e in entries}
    assert set(REQUIRED_GROUPS) <= written_groups, set(REQUIRED_GROUPS) - written_groups
    assert {"engine", "multimodal", "ascend"} <= written_groups
    vllm_entries = [e for e in entries if e["symbol"].startswith("vllm.")]
    # vLLM 0.32.0: 77 table entries, 75 written (see the test above for the two left out);
    # the model runner's execute_model is listed twice with different handlers.
    assert len(sp.VLLM_SYMBOLS) == 77
    assert len(vllm_entries) == 75 >= 60
    assert len({e["symbol"] for e in vllm_entries}) == 74
    assert len(entries) == 75 + len(sp.OWN_SYMBOLS)


def test_wildcard_symbol_expands_to_the_models_that_define_it() -> None:
    index = sp.SourceIndex()
    found = list(index.matches("vllm.model_executor.models.*:*.embed_multimodal"))
    assert len(found) > 20
    assert all(s.startswith("vllm.model_executor.models.") and s.endswith(".embed_multimodal")
               for s in found)
    assert "vllm.model_executor.models.llava:LlavaForConditionalGeneration.embed_multimodal" in (
        found)
    assert not sp.symbol_exists("vllm.model_executor.models.*:*.no_such_method_anywhere")
    assert not sp.symbol_exists("vllm.no_such_package.*:*.forward")
    assert sp.symbol_exists("vllm.v1.core.sched.scheduler:Sched*.schedule")


def test_symbol_check_imports_nothing(py_runner, make_env, tmp_path) -> None:
    out = py_runner("""
        import json, sys
        from vllm_ascend.observability import service_profiling as sp
        n = len(sp.existing_symbols(sp.VLLM_SYMBOLS, "0.32.0"))
        print("RESULT " + json.dumps({"n": n, "imported": sorted(
            m for m in ("torch", "vllm") if m in sys.modules)}))
    """, make_env(tmp_path))
    assert out == {"n": 75, "imported": []}


def test_version_bounds_are_inclusive_and_filter_entries(tmp_path) -> None:
    entry = sp.ProfilingSymbol("vllm.v1.utils:record_function_or_nullcontext", "Execute", "r",
                               min_version="0.15.0rc1", max_version="0.32.0")
    assert [sp.in_version_range(entry, v) for v in
            ("0.14.0", "0.15.0rc1", "0.15.0", "0.32.0", "0.32.1", "not-a-version")] == [
        False, True, True, True, False, True]
    # The same table written for an old vLLM version drops entries that start later.
    old = [e["symbol"] for e in _written(tmp_path, "0.14.0")]
    assert "vllm.v1.utils:record_function_or_nullcontext" not in old
    assert "vllm.v1.utils:record_function_or_nullcontext" in [
        e["symbol"] for e in _written(tmp_path, "0.32.0")]
    written = next(e for e in _written(tmp_path, "0.32.0")
                   if e["symbol"] == "vllm.v1.utils:record_function_or_nullcontext")
    assert written["min_version"] == "0.15.0rc1"  # kept as a string for the profiler


def test_malformed_table_entries_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"'vllm\.v1:' must look like 'package\.module:"):
        sp.ProfilingSymbol("vllm.v1:", "Execute", "x")
    with pytest.raises(ValueError, match=r"unknown group 'nope'; allowed: openai"):
        sp.ProfilingSymbol("a.b:c", "Execute", "x", group="nope")
    with pytest.raises(ValueError, match=r"min_version '0\.9\.x' is not a release"):
        sp.ProfilingSymbol("a.b:c", "Execute", "x", min_version="0.9.x")


def test_attributes_and_handlers_are_written(tmp_path) -> None:
    by_name = {e["name"]: e for e in _written(tmp_path)}
    match = by_name["MooncakeScheduler.matchRemoteKV"]
    assert match["attributes"][0] == {"name": "req_id", "expr": "args[1] | attr request_id | str"}
    assert by_name["modelRunnerExec"]["handler"] == (
        "ms_service_profiler.patcher.vllm.handlers.v1.model_handlers:execute_model_runner")
    assert by_name["modelRunnerMeta"]["symbol"] == by_name["modelRunnerExec"]["symbol"]


def test_runtime_extension_symbols_are_listed(tmp_path, monkeypatch) -> None:
    from vllm_ascend.base import extension_points

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    entries = _written(tmp_path, "9.9.9", runtime_classes=extension_points.runtime_class_paths(),
                       scheduler_classes=extension_points.scheduler_class_paths())
    by_symbol = {e["symbol"]: e for e in entries}
    assert by_symbol["ascend_test_ext:TestWorker.execute_model"]["name"] == (
        "RuntimeExecuteModel")
    schedule = by_symbol["ascend_test_ext:TestScheduler.schedule"]
    assert schedule["domain"] == "Scheduler"
    assert [a["name"] for a in schedule["attributes"]] == [
        "num_scheduled_tokens", "total_num_scheduled_tokens"]
    # A runtime class without execute_model is filtered out like any other symbol.
    other = _written(tmp_path / "other", "9.9.9",
                     runtime_classes={
                         "worker": "vllm_ascend.compilation.pass_manager.AscendPassManager"})
    assert not any("AscendPassManager.execute_model" in e["symbol"] for e in other)
    assert sp.runtime_symbols({"worker": "pkg.mod.Worker"})[0].symbol == (
        "pkg.mod:Worker.execute_model")


def test_existing_file_is_never_overwritten(tmp_path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    target = sp.config_path("0.32.0", env)
    target.parent.mkdir(parents=True)
    target.write_text("# my edits\n")
    assert sp.generate_service_profiling_config("0.32.0", environ=env) == target
    assert target.read_text() == "# my edits\n"


def test_unwritable_dir_returns_none_with_one_warning(tmp_path, caplog) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.observability.service_profiling"):
        assert sp.generate_service_profiling_config(
            "0.32.0", environ={"XDG_CONFIG_HOME": str(blocker)}) is None
    assert len(caplog.records) == 1 and "cannot write" in caplog.records[0].getMessage()


def test_failed_link_leaves_no_temp_file(tmp_path, monkeypatch) -> None:
    # A permission error while linking into place (a read-only directory for a non-root user;
    # simulated because root ignores directory permissions) must leave nothing behind.
    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(sp.os, "link", refuse)
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert sp.generate_service_profiling_config("0.32.0", environ=env) is None
    assert list(sp.config_path("0.32.0", env).parent.iterdir()) == []


def test_concurrent_writers_produce_one_complete_file(tmp_path, monkeypatch) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    target = sp.config_path("0.32.0", env)
    target.parent.mkdir(parents=True)
    barrier = threading.Barrier(8, timeout=60)
    real = sp._write_once

    def racing(path, text):  # every writer passes the exists() check, then races to link
        barrier.wait()
        return real(path, text)

    monkeypatch.setattr(sp, "_write_once", racing)
    results: list[object] = []

    def writer() -> None:
        try:
            results.append(sp.generate_service_profiling_config("0.32.0", environ=env))
        except BaseException as exc:  # surfaced by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [target] * 8
    assert [p.name for p in target.parent.iterdir()] == [target.name]
    assert len(yaml.safe_load(target.read_text())) > 10


def test_a_users_file_written_during_generation_wins(tmp_path, monkeypatch) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    target = sp.config_path("0.32.0", env)
    real = sp._write_once

    def user_first(path, text):
        path.write_text("# user\n")
        return real(path, text)

    monkeypatch.setattr(sp, "_write_once", user_first)
    sp.generate_service_profiling_config("0.32.0", environ=env)
    assert target.read_text() == "# user\n"
