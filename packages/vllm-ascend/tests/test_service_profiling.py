"""Service-profiling symbols: written once per vLLM version, atomically, never over edits."""

from __future__ import annotations

import importlib
import logging
import threading

import yaml
from vllm_ascend import service_profiling as sp


def _resolve(symbol: str) -> object:
    module, _, qualname = symbol.partition(":")
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_config_dir_follows_xdg(tmp_path) -> None:
    assert sp.config_dir({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "vllm_ascend"
    assert sp.config_dir({"HOME": "/h"}) == sp.Path("/h/.config/vllm_ascend")


def test_generated_file_lists_only_resolvable_symbols(tmp_path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    path = sp.generate_service_profiling_config("0.32.0", environ=env)
    assert path == tmp_path / "vllm_ascend" / "service_profiling_symbols.0.32.0.yaml"
    entries = yaml.safe_load(path.read_text())
    symbols = [e["symbol"] for e in entries]
    assert "vllm.v1.core.sched.scheduler:Scheduler.schedule" in symbols
    assert "vllm_ascend.moe_comm:select_moe_comm_method" in symbols
    # A candidate absent from this vLLM is left out.
    assert not any(s.endswith("_execute_model_forward") for s in symbols)
    for entry in entries:
        assert callable(_resolve(entry["symbol"])), entry["symbol"]
        assert set(entry) <= {"symbol", "domain", "name", "handler"}
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]


def test_runtime_extension_symbols_are_listed(tmp_path) -> None:
    path = sp.generate_service_profiling_config(
        "9.9.9", runtime_classes={"worker": "vllm_ascend.pass_manager.AscendPassManager"},
        environ={"XDG_CONFIG_HOME": str(tmp_path)},
    )
    symbols = [e["symbol"] for e in yaml.safe_load(path.read_text())]
    # The class has no execute_model: the runtime symbol is filtered out like any other.
    assert not any("AscendPassManager.execute_model" in s for s in symbols)
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
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.service_profiling"):
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
    # Import the symbols' modules first: eight threads importing vLLM at once is a test of
    # the import system, not of the writer.
    sp.existing_symbols([*sp.VLLM_CANDIDATES, *sp.OWN_SYMBOLS])
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
