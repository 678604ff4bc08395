"""The emulated NPUGraph: capture records device ops, replay re-executes them on the captured
memory (task updates and the capture's refusals: ``test_npu_strict_graphs``). One fresh process
(the device install is process-wide) answers every check."""

from __future__ import annotations

from typing import Any

import pytest
from torch_npu_double.fresh_interpreter import run_json as run

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "0.25"}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return run("""
        import json, torch, torch_npu
        from torch_npu_double.emulation.graph_errors import CAPTURE_FAILURES
        from torch_npu_double.emulation.graphs import NPUGraph
        out = {}
        npu = torch.npu
        x = torch.zeros(4, device="npu")
        w = torch.full((4,), 2.0, device="npu")
        calls = []
        def model(inp):
            calls.append(1)  # host code: must run at capture only
            return (inp * w + 1).view(2, 2).sum(0)
        g = npu.NPUGraph()
        with npu.graph(g):
            z = model(x)
        out["at_capture"] = z.cpu().tolist()
        x.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        g.replay()
        out["after_copy_in"] = z.cpu().tolist()
        fresh = torch.tensor([10.0, 10.0, 10.0, 10.0], device="npu")
        g.replay()  # a new tensor elsewhere is not what the graph reads
        out["fresh_ignored"] = z.cpu().tolist()
        out["python_calls"] = len(calls)
        out["replays"] = g.replays

        # a dtype conversion may alias by schema but copies: the replay must redo it
        ids = torch.zeros(2, dtype=torch.int32, device="npu")
        g2 = npu.NPUGraph()
        with npu.graph(g2):
            as_long = ids.to(torch.int64) + 0
        ids.copy_(torch.tensor([5, 7], dtype=torch.int32))
        g2.replay()
        out["converted"] = as_long.cpu().tolist()

        # host reads are refused during capture, and the capture is abandoned
        g3 = npu.NPUGraph()
        try:
            with npu.graph(g3):
                (x + 1).sum().item()
            out["host_read"] = None
        except RuntimeError as e:
            out["host_read"] = str(e)
        out["capturing_after"] = npu.is_current_stream_capturing()
        try:
            g3.replay()
            out["replay_uncaptured"] = None
        except RuntimeError as e:
            out["replay_uncaptured"] = str(e)

        # injected capture failures carry the real runtime's text
        failures = {}
        for kind in sorted(CAPTURE_FAILURES):
            NPUGraph.fail_next_capture = kind
            try:
                with npu.graph(npu.NPUGraph()):
                    pass
                failures[kind] = None
            except RuntimeError as e:
                failures[kind] = str(e)
        out["failures"] = failures
        out["expected_failures"] = CAPTURE_FAILURES

        # memory the capture allocated stays with the graph
        before = npu.memory_allocated()
        g5 = npu.NPUGraph()
        with npu.graph(g5):
            big = torch.ones(1024, 1024, device="npu") * 2
        out["capture_bytes"] = g5.allocated_during_capture
        out["held_after_capture"] = npu.memory_allocated() - before
        g5.replay()
        out["held_after_replay"] = npu.memory_allocated() - before
        # a graph that is reset (or dropped) gives its memory back: the graph-memory profile
        # drops what it captured before the KV cache is sized
        del big
        g5.reset()
        out["held_after_reset"] = npu.memory_allocated() - before

        # host ops: replays and the ops outside them, across host-wrapper ops (vLLM's
        # attention entry points run between PIECEWISE pieces)
        from torch_npu_double.emulation.host_ops import HostOpCounter
        lib = torch.library.Library("vllm", "FRAGMENT")
        lib.define("emulation_test_wrapper(Tensor x) -> Tensor")
        lib.impl("emulation_test_wrapper", lambda t: t * 3.0, "PrivateUse1")
        counter = HostOpCounter()
        with counter:
            g.replay()
            torch.ops.vllm.emulation_test_wrapper(x)
            g.replay()
            x + 1
        out["counted"] = {"ops": counter.ops, "replays": counter.replays}

        # host code is expanded into the device ops it issues: a mutating op in a functional
        # graph (auto_functionalized clones, then calls the op on the clone) and an op of a
        # host-wrapper namespace (vllm_ascend) are never recorded themselves
        from torch._higher_order_ops.auto_functionalize import auto_functionalized
        def triple_into(x, out):
            out.copy_(x * 3)
        def add_one(x, out):
            out.copy_(x + 1)
        lib = torch.library.Library("emu_graph_test", "FRAGMENT")
        lib.define("triple_into(Tensor x, Tensor(a!) out) -> ()")
        lib.impl("triple_into", triple_into, "CompositeExplicitAutograd")
        wrapper = torch.library.Library("vllm_ascend", "FRAGMENT")
        wrapper.define("emu_add_one(Tensor x, Tensor(a!) out) -> ()")
        wrapper.impl("emu_add_one", add_one, "CompositeExplicitAutograd")
        src = torch.ones(3, device="npu")
        base = torch.zeros(3, device="npu")
        target = torch.zeros(3, device="npu")
        g6 = npu.NPUGraph()
        with npu.graph(g6):
            _, tripled = auto_functionalized(torch.ops.emu_graph_test.triple_into.default,
                                             x=src, out=base)
            torch.ops.vllm_ascend.emu_add_one(src, target)
        src.fill_(2.0)
        g6.replay()
        out["hop_replayed"] = tripled.cpu().tolist()
        out["hop_base"] = base.cpu().tolist()
        out["wrapper_replayed"] = target.cpu().tolist()
        out["hop_recorded"] = [str(op.func) for op in g6.recorded_ops]
        print(json.dumps(out))
    """, EMU)


def test_replay_reads_the_captured_input_and_runs_no_python(report) -> None:
    assert report["at_capture"] == [2.0, 2.0]  # (0*2+1) summed over rows of [[1,1],[1,1]]
    # [1,2,3,4]*2+1 = [3,5,7,9] -> rows [3,5],[7,9] summed: [10, 14]
    assert report["after_copy_in"] == [10.0, 14.0]
    assert report["fresh_ignored"] == [10.0, 14.0]
    assert report["python_calls"] == 1
    assert report["replays"] == 2


def test_a_converting_copy_is_replayed(report) -> None:
    assert report["converted"] == [5, 7]


def test_host_read_during_capture_is_refused(report) -> None:
    assert "not allowed in capture" in report["host_read"]
    assert "_local_scalar_dense" in report["host_read"]
    assert report["capturing_after"] is False
    assert "never captured" in report["replay_uncaptured"]


def test_injected_capture_failures_raise_the_runtime_text(report) -> None:
    assert report["failures"] == report["expected_failures"]
    assert "207008" in report["failures"]["streams"]


def test_every_injected_capture_failure_is_classified_with_a_remedy(report) -> None:
    from ascend_graph import GraphCaptureError, translate_capture_error

    remedies = {"streams": "Capture fewer", "old_driver": "Upgrade the HDK",
                "not_allowed": "enforce_eager=True"}
    assert sorted(report["failures"]) == sorted(remedies)
    for kind, text in report["failures"].items():
        result = translate_capture_error(RuntimeError(text))
        assert isinstance(result, GraphCaptureError), kind
        assert remedies[kind] in str(result)
    # the emulation's own refusal of a host read is classified the same way
    assert "enforce_eager=True" in str(translate_capture_error(RuntimeError(report["host_read"])))


def test_capture_memory_stays_with_the_graph_and_replay_adds_none(report) -> None:
    mib4 = 4 * 2**20  # the 1024x1024 float32 result (the graph also holds its input)
    assert report["capture_bytes"] == report["held_after_capture"]
    assert report["capture_bytes"] >= mib4
    assert report["held_after_replay"] == report["held_after_capture"]
    # the input of ones, an intermediate a caller never sees, is held too: 2 x 4 MiB
    assert report["capture_bytes"] == 2 * mib4
    assert report["held_after_reset"] == 0


def test_host_op_counter_counts_replays_across_host_wrapper_ops(report) -> None:
    """Two replays around a vLLM-namespace wrapper op: both are counted (the wrapper's entry
    once restarted the count), and the ops outside replays are the wrapper's multiply and the
    add (the wrapper itself issues no device op of its own)."""
    assert report["counted"] == {"ops": 2, "replays": 2}


def test_host_code_is_recorded_as_the_device_ops_it_issues(report) -> None:
    assert report["hop_replayed"] == [6.0] * 3  # the clone, tripled again from the new input
    assert report["hop_base"] == [0.0] * 3  # functional: the mutated base is a clone
    assert report["wrapper_replayed"] == [3.0] * 3
    recorded = report["hop_recorded"]
    assert "aten.clone.default" in recorded and "emu_graph_test.triple_into.default" in recorded
    assert not any("auto_functionalized" in op or "vllm_ascend" in op for op in recorded)
    assert "aten.copy_.default" in recorded
