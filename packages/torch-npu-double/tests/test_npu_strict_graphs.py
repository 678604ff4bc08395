"""The strict emulated graph runtime: kernel-granularity capture, the capture's refusals, task
updates held to the hardware's rules, and the asynchronous update stream ordered only by an
``ExternalEvent``. One fresh process (the device install is process-wide) answers every check."""

from __future__ import annotations

from typing import Any

import pytest
from torch_npu_double.fresh_interpreter import run_json as run

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "1"}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return run("""
        import json, torch, torch_npu
        import ascend_kernels  # registers the ascend ops' NPU adapters (torch_npu is present)
        npu = torch.npu
        out = {}

        def capture(fn):
            g = npu.NPUGraph()
            try:
                with npu.graph(g):
                    fn()
            except RuntimeError as e:
                return str(e)
            return None

        # --- kernel granularity: an ascend op is recorded as the torch_npu kernel it issues
        x = torch.ones(2, 16, device="npu", dtype=torch.bfloat16)
        w = torch.full((16,), 2.0, device="npu", dtype=torch.bfloat16)
        g = npu.NPUGraph()
        with npu.graph(g):
            y = torch.ops.ascend.rms_norm(x, w, 1e-6)
        out["recorded"] = [str(op.func) for op in g.recorded_ops]
        real_kernel = torch_npu.npu_rms_norm
        def adapter_ran(*a, **k):
            raise AssertionError("the adapter's Python ran at replay")
        torch_npu.npu_rms_norm = adapter_ran  # the adapter looks the kernel up on torch_npu
        x.copy_(torch.arange(32.0).reshape(2, 16).to(torch.bfloat16).to("npu"))
        g.replay()
        torch_npu.npu_rms_norm = real_kernel
        xf = torch.arange(32.0).reshape(2, 16).bfloat16().float()
        expect = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * 2.0).bfloat16()
        out["replayed_rms_norm"] = bool(torch.equal(y.cpu(), expect))

        # --- refusals inside a capture; an adapter's host read is seen through the op
        lib = torch.library.Library("ascend", "FRAGMENT")
        lib.define("emu_strict_host_read(Tensor x) -> Tensor")
        lib.impl("emu_strict_host_read", lambda t: t * float(t.sum().item()), "PrivateUse1")
        out["adapter_item"] = capture(
            lambda: torch.ops.ascend.emu_strict_host_read(torch.ones(2, device="npu")))
        v = torch.ones(3, device="npu")
        out["item"] = capture(lambda: (v + 1).sum().item())
        out["bool"] = capture(lambda: bool(v.sum()))
        out["nonzero"] = capture(lambda: v.nonzero())
        out["d2h"] = capture(lambda: v.cpu())
        out["sync_device"] = capture(lambda: npu.synchronize())
        out["sync_stream"] = capture(lambda: npu.current_stream().synchronize())
        out["sync_other_stream"] = capture(lambda: npu.Stream().synchronize())
        out["pageable_copy"] = capture(lambda: v.copy_(torch.tensor([1.0, 2.0, 3.0])))
        out["pageable_tensor"] = capture(lambda: torch.tensor([1.0], device="npu"))
        out["pageable_to"] = capture(lambda: torch.ones(3).to("npu"))
        out["pinned_copy"] = capture(lambda: v.copy_(torch.ones(3).pin_memory()))

        # --- task updates: a group capturing one .out kernel after an ExternalEvent wait
        q = torch.ones(3, device="npu")
        r = torch.zeros(3, device="npu")
        s, us = npu.current_stream(), npu.Stream()
        ev = npu.ExternalEvent()
        g4 = npu.NPUGraph()
        with npu.graph(g4):
            ev.wait(s)
            ev.reset(s)
            npu.graph_task_group_begin(s)
            torch.mul(q, 5.0, out=r)
            handle = npu.graph_task_group_end(s)
            r2 = r + torch.mul(q, 100.0)
        def update(issue, record=True):
            npu.graph_task_update_begin(us, handle)
            try:
                issue()
            finally:
                try:
                    npu.graph_task_update_end(us)
                except RuntimeError as e:
                    out.setdefault("end_errors", []).append(str(e))
            if record:
                ev.record(us)
        ev.record(us)
        g4.replay()
        out["captured"] = r2.cpu().tolist()
        update(lambda: torch.mul(q, 7.0, out=r))
        out["update_runs_nothing"] = r2.cpu().tolist()
        g4.replay()
        out["updated_with_event"] = r2.cpu().tolist()
        # recorded on the wrong stream: the replay waits, resumes at the record, and runs the
        # previous parameters; the update lands after it
        update(lambda: torch.mul(q, 9.0, out=r), record=False)
        g4.replay()
        out["suspended"] = g4.waiting
        try:
            npu.synchronize()
            out["sync_while_waiting"] = None
        except RuntimeError as e:
            out["sync_while_waiting"] = str(e)
        ev.record(s)
        out["wrong_stream"] = r2.cpu().tolist()
        ev.record(us)
        g4.replay()
        out["landed_late"] = r2.cpu().tolist()

        def refused(issue):
            try:
                update(issue, record=False)
            except RuntimeError as e:
                return str(e)
            return None
        out["functional"] = refused(lambda: torch.mul(q, 7.0))
        out["other_kernel"] = refused(lambda: torch.add(q, 7.0, out=r))
        out["extra"] = refused(lambda: (torch.mul(q, 7.0, out=r), torch.mul(q, 7.0, out=r)))
        out["other_shape"] = refused(lambda: torch.mul(q[:2], 7.0, out=r[:2]))
        elsewhere = torch.empty(3, device="npu")
        out["other_output"] = refused(lambda: torch.mul(q, 7.0, out=elsewhere))
        n_end = len(out.get("end_errors", []))
        update(lambda: None, record=False)
        out["missing"] = out["end_errors"][n_end]

        # --- FIA .out in a FULL-graph task group: without the event the replay runs the
        # previous step's lengths, with it the new ones
        torch.manual_seed(0)
        T, N, KV, D, bs = 2, 4, 2, 16, 16
        qa = torch.randn(T, N, D).bfloat16()
        kc = torch.randn(2, bs, KV, D).bfloat16()
        vc = torch.randn(2, bs, KV, D).bfloat16()
        qn, kn, vn = qa.to("npu"), kc.to("npu").view(2, bs, -1), vc.to("npu").view(2, bs, -1)
        table = torch.tensor([[0], [1]], dtype=torch.int32, device="npu")
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.int8, device="npu"), 1)
        common = dict(atten_mask=mask, block_table=table, input_layout="TND", block_size=bs,
                      num_key_value_heads=KV, num_heads=N, scale=D ** -0.5, sparse_mode=3,
                      actual_seq_lengths=[1, 2])
        ws = torch_npu._npu_fused_infer_attention_score_get_max_workspace(
            qn, kn, vn, actual_seq_lengths_kv=[1, 1], **common)
        attn = torch.empty_like(qn)
        lse = torch.empty(1, device="npu")
        def fia(kv, workspace=ws, target=attn, query=qn, **extra):
            torch_npu.npu_fused_infer_attention_score.out(
                query, kn, vn, workspace=workspace, out=[target, lse],
                actual_seq_lengths_kv=kv, **(common | extra))
        events = {"with": npu.ExternalEvent(), "without": npu.ExternalEvent()}
        graphs, handles, results = {}, {}, {}
        for kind, e in events.items():
            graphs[kind] = npu.NPUGraph()
            with npu.graph(graphs[kind]):
                if kind == "with":
                    e.wait(s)
                    e.reset(s)
                npu.graph_task_group_begin(s)
                fia([1, 1])
                handles[kind] = npu.graph_task_group_end(s)
                results[kind] = attn.float() * 1
        def expected(kv):
            rows = []
            for b, n in enumerate(kv):
                k = kc[b, :n].float().repeat_interleave(N // KV, dim=1).transpose(0, 1)
                vv = vc[b, :n].float().repeat_interleave(N // KV, dim=1).transpose(0, 1)
                qq = qa[b].float().unsqueeze(1)
                p = torch.softmax(qq @ k.transpose(1, 2) * D ** -0.5, dim=-1)
                rows.append((p @ vv).squeeze(1))
            return torch.stack(rows)
        for kind, e in events.items():
            npu.graph_task_update_begin(us, handles[kind])
            fia([5, 9])
            npu.graph_task_update_end(us)
            if kind == "with":
                e.record(us)
            graphs[kind].replay()
            got = results[kind].cpu()
            out[f"fia_{kind}_new"] = bool(torch.allclose(got, expected([5, 9]), atol=2e-2))
            out[f"fia_{kind}_old"] = bool(torch.allclose(got, expected([1, 1]), atol=2e-2))
        def fia_refused(issue):
            npu.graph_task_update_begin(us, handles["with"])
            try:
                issue()
                return None
            except RuntimeError as e:
                return str(e)
            finally:
                try:
                    npu.graph_task_update_end(us)
                except RuntimeError:
                    pass
        out["fia_functional"] = fia_refused(lambda: torch_npu.npu_fused_infer_attention_score(
            qn, kn, vn, actual_seq_lengths_kv=[5, 9], **common))
        other_ws, other_attn = ws.clone(), torch.empty_like(qn)
        q3 = torch.randn(3, N, D, device="npu").bfloat16()
        table3 = torch.tensor([[0], [1], [1]], dtype=torch.int32, device="npu")
        out["fia_other_workspace"] = fia_refused(lambda: fia([5, 9], workspace=other_ws))
        out["fia_other_output"] = fia_refused(lambda: fia([5, 9], target=other_attn))
        out["fia_other_query"] = fia_refused(lambda: fia(
            [5, 9, 3], query=q3, target=attn, actual_seq_lengths=[1, 2, 3],
            block_table=table3))

        # --- ATB rope re-makes its static sequence-length tensor (a pageable host-to-device
        # copy) when the token count changes: refused inside a capture
        def rope(tokens):
            cache = torch.ones(8, 16, device="npu", dtype=torch.float16)
            qr = torch.ones(tokens, 16, device="npu", dtype=torch.float16)
            torch_npu._npu_rotary_embedding(torch.zeros(tokens, dtype=torch.long, device="npu"),
                                            qr, qr.clone(), 16, cache, True)
        rope(2)
        out["rope_same_tokens"] = capture(lambda: rope(2))
        out["rope_other_tokens"] = capture(lambda: rope(3))

        # --- sync counting (outside captures)
        from torch_npu_double.emulation.host_ops import HostOpCounter
        lens = torch.tensor([2, 1, 3], device="npu")
        ids = torch.arange(3, device="npu")
        counts, waits = {}, {}

        def _in_inference(fn):
            with torch.inference_mode():
                return fn()
        for case, fn in {
            "item": lambda: lens.sum().item(),
            "repeat_interleave": lambda: torch.repeat_interleave(ids, lens),
            "repeat_interleave_sized": lambda: torch.repeat_interleave(ids, lens,
                                                                       output_size=6),
            "repeat_interleave_inference": lambda: _in_inference(
                lambda: torch.repeat_interleave(ids, lens)),
            "repeat_interleave_inference_sized": lambda: _in_inference(
                lambda: torch.repeat_interleave(ids, lens, output_size=6)),
            "int": lambda: int(lens[-1]),
            "d2h": lambda: lens.cpu(),
            "synchronize": lambda: npu.synchronize(),
            "stream_synchronize": lambda: npu.current_stream().synchronize(),
            "event_synchronize": lambda: npu.Event().synchronize(),
            "device_math": lambda: lens * 2 + 1,
        }.items():
            counter = HostOpCounter()
            with counter:
                fn()
            counts[case] = counter.syncs
            waits[case] = counter.event_waits
        out["syncs"] = counts
        out["event_waits"] = waits
        print(json.dumps(out))
    """, EMU)


def test_an_ascend_op_is_recorded_as_its_kernels_and_replays_no_adapter_code(report) -> None:
    assert "torch_npu_emulated.npu_rms_norm.default" in report["recorded"]
    assert not any(op.startswith("ascend.") for op in report["recorded"])
    assert report["replayed_rms_norm"] is True


@pytest.mark.parametrize("case", ["item", "bool", "nonzero", "d2h", "adapter_item"])
def test_host_reads_are_refused_in_capture(report, case) -> None:
    assert "reads npu memory on the host" in report[case]
    assert "operation not allowed in capture" in report[case]


@pytest.mark.parametrize("case", ["sync_device", "sync_stream", "sync_other_stream"])
def test_synchronize_is_refused_in_capture(report, case) -> None:
    assert "synchronize() during NPU graph capture" in report[case]
    assert "operation not allowed in capture" in report[case]


@pytest.mark.parametrize("case", ["pageable_copy", "pageable_tensor", "pageable_to"])
def test_pageable_host_to_device_copy_is_refused_in_capture(report, case) -> None:
    assert "pageable (not pinned) host memory" in report[case]
    assert report["pinned_copy"] is None


@pytest.mark.parametrize("case", ["item", "sync_device", "sync_stream", "pageable_copy",
                                  "pageable_tensor"])
def test_the_products_capture_error_classification_names_each_refusal(report, case) -> None:
    from ascend_graph import GraphCaptureError, translate_capture_error

    result = translate_capture_error(RuntimeError(report[case]))
    assert isinstance(result, GraphCaptureError)
    assert "enforce_eager=True" in str(result)
    assert report[case] in str(result)  # the original text, so the cause is named


def test_an_update_reaches_the_replay_only_through_its_recorded_event(report) -> None:
    assert report["captured"] == [105.0] * 3
    assert report["update_runs_nothing"] == [105.0] * 3
    assert report["updated_with_event"] == [107.0] * 3
    assert report["suspended"] is True
    assert "waits on an ExternalEvent nothing recorded" in report["sync_while_waiting"]
    assert report["wrong_stream"] == [107.0] * 3  # previous parameters
    assert report["landed_late"] == [109.0] * 3


def test_update_refusals_name_what_differed(report) -> None:
    assert "allocates its output" in report["functional"]
    assert "the group captured aten.mul.out there" in report["other_kernel"]
    assert "an extra task" in report["extra"]
    assert "has shape [2]; captured [3]" in report["other_shape"]
    assert "out (written by the kernel) is at" in report["other_output"]
    assert "a missing task (aten.mul.out)" in report["missing"]
    for case in ("functional", "other_kernel", "extra", "other_shape", "other_output"):
        assert "task group at calls" in report[case], case


def test_fia_update_without_the_event_replays_the_previous_lengths(report) -> None:
    assert report["fia_with_new"] is True and report["fia_with_old"] is False
    assert report["fia_without_old"] is True and report["fia_without_new"] is False


def test_fia_update_must_reissue_the_out_kernel_on_the_captured_buffers(report) -> None:
    assert "allocates its output" in report["fia_functional"]
    assert "workspace (written by the kernel) is at" in report["fia_other_workspace"]
    assert "out[0] (written by the kernel) is at" in report["fia_other_output"]
    assert "query has shape [3, 4, 16]; captured [2, 4, 16]" in report["fia_other_query"]


def test_sync_counter_counts_host_waits_and_unsized_repeat_interleave(report) -> None:
    # under inference_mode (vLLM's step preparation) repeat_interleave reaches the counter as
    # its self_Tensor overload, undecomposed
    assert report["syncs"] == {"item": 1, "repeat_interleave": 1, "repeat_interleave_sized": 0,
                               "repeat_interleave_inference": 1,
                               "repeat_interleave_inference_sized": 0, "int": 1, "d2h": 1,
                               "synchronize": 1, "stream_synchronize": 1,
                               "event_synchronize": 0, "device_math": 0}
    # an event's synchronize() is counted apart (vLLM's runner waits on its own events)
    assert report["event_waits"]["event_synchronize"] == 1
    assert sum(report["event_waits"].values()) == 1


def test_atb_rope_token_count_change_is_refused_in_capture(report) -> None:
    assert report["rope_same_tokens"] is None
    assert "token count changed (2 -> 3)" in report["rope_other_tokens"]
    assert "operation not allowed in capture" in report["rope_other_tokens"]
