"""ready_watch: compiles, pass-manager runs and captures are counted before and after the engine
is ready; after ready each cause is logged once, and strict mode makes it an error. Dynamo
compiles are real torch.compile recompiles, counted against torch's own frame counter; a watch
counts only those inside its engine's work on the thread (``watching``), and a freed watch or
engine leaves no Dynamo callback behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch


@pytest.fixture
def watch() -> Iterator[Any]:
    from vllm_ascend.engine.ready_watch import ReadyWatch

    torch._dynamo.reset()
    found = ReadyWatch()
    found.install()
    with found.watching():  # the tests below compile as the engine's work does
        yield found
    found.uninstall()
    torch._dynamo.reset()


def _frames_compiled() -> int:
    """torch's own count of frames Dynamo compiled."""
    return int(torch._dynamo.utils.counters["frames"]["ok"])


def test_dynamo_compiles_before_ready_are_totals_not_after_ready(watch: Any) -> None:
    fn = torch.compile(lambda x: x * 2 + 1, backend="eager")
    frames = _frames_compiled()
    fn(torch.ones(2))
    fn(torch.ones(2))  # cached: no compile
    assert watch.compiles == _frames_compiled() - frames == 1
    assert watch.compile_seconds > 0
    assert watch.after_ready == {"compiles": 0, "pass_runs": 0, "captures": 0}
    report = watch.as_report()
    assert report["compiles"]["count"] == 1 and report["ready"] is False


def test_a_new_shape_after_ready_is_one_compile_logged_with_its_guard_failure(
        watch: Any, logged: Any) -> None:
    fn = torch.compile(lambda x: x.sin() + 1, backend="eager")
    fn(torch.ones(2))
    events: list[int] = []
    watch.mark_ready(on_after_ready=lambda: events.append(watch.after_ready["compiles"]))
    frames = _frames_compiled()
    with logged("vllm_ascend.engine.ready_watch") as lines:
        fn(torch.ones(2))  # the shape seen before ready: no compile
        assert watch.after_ready["compiles"] == 0
        fn(torch.ones(3))  # size mismatch: Dynamo recompiles (now with a dynamic size)
        fn(torch.ones(5))  # covered by the dynamic graph: no compile
    assert watch.after_ready["compiles"] == _frames_compiled() - frames == 1
    assert events == [1]  # the report writer ran once, after the count
    warnings = [line for line in lines if "after the engine was ready" in line]
    assert len(warnings) == 1
    assert "guard failure" in warnings[0] and "size mismatch at index 0" in warnings[0]
    assert "expected 2, actual 3" in warnings[0]
    assert watch.as_report()["after_ready"]["causes"] == [warnings[0].split(": ", 1)[1]
                                                          .split(" (compiles")[0]]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


def test_each_recompile_names_the_function_whose_guard_failed(watch: Any) -> None:
    double = torch.compile(_double, backend="eager")
    halve = torch.compile(_halve, backend="eager")
    double(torch.ones(2))
    halve(torch.ones(2))
    watch.mark_ready()
    double(torch.ones(3))  # size change: double's guards fail
    halve(torch.ones(3))  # then halve's
    double(torch.ones(2, 2))  # a new rank: double's guards fail again
    assert watch.after_ready["compiles"] == 3
    named = [cause.split("guard failure: ")[1].split(" (")[0] for cause in watch.causes]
    assert named == ["_double", "_halve", "_double"]


def test_a_function_first_compiled_after_ready_is_named_as_such(watch: Any) -> None:
    watch.mark_ready()
    fn = torch.compile(lambda x: x - 1, backend="eager")
    fn(torch.ones(4))
    assert watch.after_ready["compiles"] == 1
    assert watch.causes[0].endswith("a function compiled for the first time")


def test_strict_mode_refuses_a_compile_after_ready_and_runs_the_function_uncompiled(
        watch: Any, logged: Any) -> None:
    fn = torch.compile(lambda x: x.cos(), backend="eager")
    fn(torch.ones(2))
    watch.mark_ready(strict=True)
    fn(torch.ones(2))  # no compile: nothing refused
    assert watch.after_ready["compiles"] == 0
    frames_ok = _frames_compiled()
    with logged("vllm_ascend.engine.ready_watch") as lines:
        seven = torch.arange(7.0)
        # The caller gets torch's eager answer instead of an error, and nothing is compiled.
        assert torch.equal(fn(seven), torch.cos(seven))
        assert torch.equal(fn(seven + 1), torch.cos(seven + 1))  # skipped now: no new attempt
    assert _frames_compiled() == frames_ok
    assert watch.after_ready["compiles"] == 1
    errors = [line for line in lines if "after the engine was ready" in line]
    assert len(errors) == 1
    assert "size mismatch" in errors[0] and "refused" in errors[0]
    assert "ascend_compilation_config.forbid_compile_after_ready is true" in errors[0]


def test_strict_mode_refuses_a_function_first_compiled_after_ready(watch: Any) -> None:
    watch.mark_ready(strict=True)
    fn = torch.compile(lambda x: x * 3 - 1, backend="eager")
    x = torch.arange(5.0)
    assert torch.equal(fn(x), x * 3 - 1)
    assert watch.after_ready["compiles"] == 1
    assert watch.causes[0].endswith("a function compiled for the first time")


def test_strict_mode_still_fails_a_fullgraph_compile_with_the_error(watch: Any) -> None:
    from vllm_ascend.engine.ready_watch import CompileAfterReadyError

    fn = torch.compile(lambda x: x.tan(), backend="eager", fullgraph=True)
    watch.mark_ready(strict=True)
    with pytest.raises(Exception) as raised:
        fn(torch.ones(2))
    chain = [raised.value, raised.value.__cause__, raised.value.__context__]
    errors = [e for e in chain if isinstance(e, CompileAfterReadyError)]
    assert errors, f"not a CompileAfterReadyError: {raised.value!r}"
    assert "ascend_compilation_config.forbid_compile_after_ready" in str(errors[0])


def test_note_counts_every_event_but_logs_each_cause_once(logged: Any) -> None:
    from vllm_ascend.engine.ready_watch import ReadyWatch

    watch = ReadyWatch()
    watch.note("pass_runs", "range [1, 8]")  # before ready: a total only
    assert (watch.pass_runs, watch.after_ready["pass_runs"]) == (1, 0)
    watch.mark_ready()
    with logged("vllm_ascend.engine.ready_watch") as lines:
        for cause in ("range [9, 9]", "range [9, 9]", "range [10, 10]"):
            watch.note("pass_runs", cause)
        watch.note("captures", "FULL num_tokens=3")
    assert watch.after_ready == {"compiles": 0, "pass_runs": 3, "captures": 1}
    assert watch.pass_runs == 4
    assert [line.split(" (")[0] for line in lines if "after the engine" in line] == [
        "pass-manager run after the engine was ready: range [9, 9]",
        "pass-manager run after the engine was ready: range [10, 10]",
        "graph capture after the engine was ready: FULL num_tokens=3",
    ]


def test_strict_note_counts_then_raises_naming_the_key() -> None:
    from vllm_ascend.engine.ready_watch import CompileAfterReadyError, ReadyWatch

    watch = ReadyWatch()
    watch.mark_ready(strict=True)
    with pytest.raises(CompileAfterReadyError, match=r"graph capture after the engine was "
                       r"ready: PIECEWISE num_tokens=4; ascend_compilation_config\."
                       r"forbid_compile_after_ready is true"):
        watch.note("captures", "PIECEWISE num_tokens=4")
    assert watch.after_ready["captures"] == 1


def test_an_unknown_kind_is_refused_naming_the_allowed_ones() -> None:
    from vllm_ascend.engine.ready_watch import ReadyWatch

    with pytest.raises(ValueError, match="kind='compile' is not allowed; allowed: compiles, "
                                         "pass_runs, captures"):
        ReadyWatch().note("compile", "x")


def test_guard_failure_reasons_lose_only_a_leading_compile_id() -> None:
    from vllm_ascend.engine.ready_watch import _strip_compile_id

    assert _strip_compile_id("0/1: tensor 'x' size mismatch") == "tensor 'x' size mismatch"
    assert _strip_compile_id("[0/1]: x") == "x"
    assert _strip_compile_id("tensor 'x': size mismatch") == "tensor 'x': size mismatch"
    assert _strip_compile_id("a b/c: d") == "a b/c: d"


def test_the_pass_manager_counts_its_runs_in_the_engines_watch(make_vllm_config) -> None:
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.config.utils import Range
    from vllm_ascend.compilation.pass_manager import AscendPassManager
    from vllm_ascend.engine import engine_of

    config = make_vllm_config()
    manager = AscendPassManager()
    manager.configure(config)
    graph = torch.fx.symbolic_trace(lambda x: x + 1).graph
    with pass_context(Range(start=1, end=16)):
        manager(graph)
    watch = engine_of(config).ready
    assert (watch.pass_runs, watch.after_ready["pass_runs"]) == (1, 0)
    watch.mark_ready()
    new_range = Range(start=17, end=17)
    with pass_context(new_range):
        manager(graph)
    assert watch.after_ready["pass_runs"] == 1
    assert watch.causes == [f"passes run for compile range {new_range} (a new shape)"]


def test_the_report_lists_the_first_causes_and_the_log_has_every_one(logged: Any) -> None:
    from vllm_ascend.engine.ready_watch import MAX_REPORTED_CAUSES, ReadyWatch

    watch = ReadyWatch()
    watch.mark_ready()
    with logged("vllm_ascend.engine.ready_watch") as lines:
        for size in range(MAX_REPORTED_CAUSES + 1):
            watch.note("captures", f"num_tokens={size}")
            watch.note("captures", f"num_tokens={size}")
    assert watch.after_ready["captures"] == 2 * (MAX_REPORTED_CAUSES + 1)
    assert len([line for line in lines if "after the engine" in line]) == MAX_REPORTED_CAUSES + 1
    assert watch.as_report()["after_ready"]["causes"] == [
        f"num_tokens={size}" for size in range(MAX_REPORTED_CAUSES)]


def _registered() -> int:
    from torch._dynamo.callback import callback_handler

    return len(callback_handler.start_callbacks) + len(callback_handler.end_callbacks)


def test_compiles_outside_the_engines_work_are_not_its_own() -> None:
    """Another engine's compile or the user's own torch.compile on this thread, after a strict
    engine is ready: not counted, no error; inside the engine's work it is refused."""
    from vllm_ascend.engine.ready_watch import ReadyWatch

    torch._dynamo.reset()
    watch = ReadyWatch()
    watch.install()
    try:
        with watch.watching():
            torch.compile(lambda x: x + 3, backend="eager")(torch.ones(2))
        assert watch.compiles == 1
        watch.mark_ready(strict=True)
        frames = _frames_compiled()
        out = torch.compile(lambda x: x * 2 + 1)(torch.ones(3))  # the user's own
        assert out.tolist() == [3.0, 3.0, 3.0] and _frames_compiled() - frames == 1
        assert watch.compiles == 1 and watch.after_ready["compiles"] == 0
        frames = _frames_compiled()
        with watch.watching():  # the engine's own: refused, so it runs uncompiled
            out = torch.compile(lambda x: x - 5, backend="eager")(torch.ones(2))
        assert out.tolist() == [-4.0, -4.0] and _frames_compiled() == frames
        assert watch.after_ready["compiles"] == 1
    finally:
        watch.uninstall()
        torch._dynamo.reset()


def test_the_scope_is_per_thread() -> None:
    import threading

    from vllm_ascend.engine.ready_watch import ReadyWatch

    watch = ReadyWatch()
    seen: list[bool] = []
    with watch.watching():
        thread = threading.Thread(target=lambda: seen.append(watch.active))
        thread.start()
        thread.join()
        assert watch.active
    assert seen == [False] and not watch.active


def test_a_freed_watch_takes_its_dynamo_callbacks_with_it() -> None:
    import gc
    import weakref

    from vllm_ascend.engine.ready_watch import ReadyWatch

    before = _registered()
    watch = ReadyWatch()
    watch.install()
    watch.install()  # idempotent
    assert _registered() == before + 2 and watch.installed
    ref = weakref.ref(watch)
    del watch
    gc.collect()
    assert ref() is None  # Dynamo's handler did not keep it alive
    assert _registered() == before


def test_resetting_the_engines_removes_every_watchs_dynamo_callbacks(make_vllm_config) -> None:
    from vllm_ascend.engine import engine_of
    from vllm_ascend.engine.registry import reset_engines

    before = _registered()
    config = make_vllm_config()
    watch = engine_of(config).ready
    watch.install()
    assert _registered() == before + 2
    reset_engines()
    assert _registered() == before and not watch.installed
    assert engine_of(config).ready is not watch  # a fresh process has a new engine
