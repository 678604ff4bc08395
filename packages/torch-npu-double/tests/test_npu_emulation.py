"""The emulated npu device, checked in fresh processes (its install is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

GIB = 2**30


def run(code: str, env: dict[str, str] | None = None, timeout: float = 600) -> Any:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_EMULATED")}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


EMU = {"VLLM_ASCEND_EMULATED_NPUS": "2", "VLLM_ASCEND_EMULATED_HBM_GIB": "0.25"}


@pytest.fixture(scope="module")
def device_report() -> dict[str, Any]:
    return run("""
        import json, torch, torch_npu
        out = {}
        out["count"] = torch.npu.device_count()
        out["accelerator"] = str(torch.accelerator.current_accelerator())
        out["soc"] = torch_npu.npu.get_soc_version()
        x = torch.arange(6.0).reshape(2, 3).to("npu")
        out["device"] = str(x.device)
        out["ptr"] = x.data_ptr() != 0
        out["math"] = (x.t() @ x + 1).cpu().tolist()
        kv = torch.zeros(2, 4, 3, device="npu")
        kv[1].index_copy_(0, torch.tensor([2], device="npu"), torch.ones(1, 3, device="npu"))
        out["kv"] = kv.cpu().sum(dim=(1, 2)).tolist()
        try:
            x + torch.ones(2, 3)
            out["mixed"] = None
        except RuntimeError as e:
            out["mixed"] = str(e)
        out["scalar"] = (x + torch.tensor(1.0)).cpu().tolist()
        torch.npu.empty_cache()
        base = torch.npu.memory_allocated()
        out["base"] = base
        a = torch.empty(1024, 1024, dtype=torch.uint8, device="npu")
        out["after_alloc"] = torch.npu.memory_allocated() - base
        free, total = torch.npu.mem_get_info()
        out["free_total"] = [free, total]
        del a
        out["after_free"] = torch.npu.memory_allocated() - base
        out["peak"] = torch.npu.max_memory_allocated() - base
        torch.npu.reset_peak_memory_stats()
        out["peak_reset"] = torch.npu.max_memory_allocated() - base
        out["stats_current"] = torch.npu.memory_stats()["allocated_bytes.all.current"] - base
        free = torch.npu.mem_get_info()[0]
        b = torch.empty(free, dtype=torch.uint8, device="npu")  # exactly what is free
        out["full_free"] = torch.npu.mem_get_info()[0]
        try:
            torch.empty(1, dtype=torch.uint8, device="npu")
            out["oom"] = None
        except torch.OutOfMemoryError as e:
            out["oom"] = str(e)
        del b
        out["dev1"] = torch.npu.memory_allocated(1)
        try:
            torch.npu.mem_get_info(devic=0)
            out["bad_kw"] = None
        except TypeError as e:
            out["bad_kw"] = str(e)
        try:
            torch.npu.Event(enable_timing=True, foo=1)
            out["bad_event"] = None
        except TypeError as e:
            out["bad_event"] = str(e)
        g = torch.ones(3, device="npu")
        try:
            torch_npu.npu_rms_norm(x, g, eps=1e-5)
            out["bad_kernel"] = None
        except RuntimeError as e:
            out["bad_kernel"] = str(e)
        try:
            torch_npu.npu_rms_norm(x.cpu(), g.cpu())
            out["cpu_kernel"] = None
        except RuntimeError as e:
            out["cpu_kernel"] = str(e)
        y, rstd = torch_npu.npu_rms_norm(x, g, 1e-6)
        out["rms"] = y.cpu().tolist()
        import sys
        out["vllm_modules"] = sorted({m for m in sys.modules
                                      if m.split(".")[0] in ("vllm", "vllm_ascend")})
        print(json.dumps(out))
    """, EMU)


def test_the_device_and_its_kernels_import_neither_vllm_nor_vllm_ascend(
        device_report: dict[str, Any]) -> None:
    """The double has no vLLM dependency: installing the device, its allocator, its build
    cache and a kernel computed with the ascend references import neither."""
    assert device_report["rms"] and device_report["vllm_modules"] == []


def test_n_devices_and_real_dispatch(device_report: dict[str, Any]) -> None:
    r = device_report
    assert r["count"] == 2 and r["accelerator"] == "npu" and r["device"] == "npu:0"
    assert r["soc"] == 220  # Ascend910B1, the default A2 part
    assert r["ptr"]
    x = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    expect = [[sum(x[k][i] * x[k][j] for k in range(2)) + 1 for j in range(3)] for i in range(3)]
    assert r["math"] == expect
    assert r["kv"] == [0.0, 3.0]  # the write through a view landed in kv[1]
    assert r["scalar"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]  # 0-dim CPU scalars are allowed


def test_visible_devices_are_numbered_from_0_and_the_others_are_not_there() -> None:
    """``ASCEND_RT_VISIBLE_DEVICES=3,1`` on four NPUs: this process sees two, ``npu:0`` and
    ``npu:1``, and ``npu:2`` does not exist (as with the CANN runtime)."""
    out = run("""
        import json, torch
        out = {"count": torch.npu.device_count()}
        torch.npu.set_device("npu:1")
        out["on_1"] = str(torch.ones(2, device="npu:1").device)
        for name, call in (("tensor", lambda: torch.ones(2, device="npu:2")),
                           ("set_device", lambda: torch.npu.set_device(2))):
            try:
                call()
                out[name] = None
            except RuntimeError as e:
                out[name] = str(e)
        print(json.dumps(out))
    """, {**EMU, "VLLM_ASCEND_EMULATED_NPUS": "4", "ASCEND_RT_VISIBLE_DEVICES": "3,1"})
    assert (out["count"], out["on_1"]) == (2, "npu:1")
    assert "Invalid device id 2" in out["tensor"] and "2 " in out["tensor"], out
    assert out["set_device"] == "Invalid device id 2: the emulation has 2 visible NPU(s)"


def test_cpu_tensor_where_npu_is_needed_raises(device_report: dict[str, Any]) -> None:
    assert "npu:0 and cpu" in device_report["mixed"]
    assert "expected all tensors on npu" in device_report["cpu_kernel"]


def test_hbm_accounting_and_oom_at_the_boundary(device_report: dict[str, Any]) -> None:
    r = device_report
    assert r["after_alloc"] == 2**20 and r["after_free"] == 0
    assert r["peak"] == 2**20 and r["peak_reset"] == 0 and r["stats_current"] == 0
    assert r["free_total"][1] == GIB // 4
    assert r["base"] > 0  # the tensors made before
    assert r["free_total"][0] == GIB // 4 - r["base"] - 2**20
    assert r["full_free"] == 0  # the last free byte can be allocated ...
    assert r["oom"].startswith("NPU out of memory. Tried to allocate")  # ... one more cannot
    assert r["dev1"] == 0  # accounting is per device


def test_signature_binding_rejects_a_wrong_keyword(device_report: dict[str, Any]) -> None:
    assert "mem_get_info(device=None)" in device_report["bad_kw"]
    assert "unexpected keyword argument 'devic'" in device_report["bad_kw"]
    assert "'foo'" in device_report["bad_event"]


def test_kernel_schema_rejects_a_wrong_call_and_computes(device_report: dict[str, Any]) -> None:
    assert "Unknown keyword argument 'eps'" in device_report["bad_kernel"]
    rows = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    for got, row in zip(device_report["rms"], rows, strict=True):
        rms = (sum(v * v for v in row) / 3 + 1e-6) ** 0.5
        assert got == pytest.approx([v / rms for v in row], rel=1e-5)


def test_without_the_variable_there_is_no_npu() -> None:
    r = run("""
        import json, sys, torch
        try:
            torch.device("npu")
            dev = True
        except RuntimeError:
            dev = False
        print(json.dumps({"npu": hasattr(torch, "npu"), "device": dev,
                          "torch_npu": "torch_npu" in sys.modules,
                          "emu": "torch_npu_double.emulation.device" in sys.modules}))
    """)
    assert r == {"npu": False, "device": False, "torch_npu": False, "emu": False}


def test_transformers_forward_on_npu_equals_cpu() -> None:
    r = run("""
        import json, torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        model = LlamaForCausalLM(cfg).eval()
        ids = torch.randint(0, 128, (2, 12))
        with torch.no_grad():
            ref = model(ids).logits
            got = model.to("npu")(ids.to("npu")).logits
        print(json.dumps({"device": str(got.device),
                          "diff": (got.cpu() - ref).abs().max().item()}))
    """, EMU)
    assert r["device"] == "npu:0"
    assert r["diff"] <= 1e-5


HCCL_WORKER = """
import json, sys, torch, torch.distributed as dist
rank, rdv = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("hccl", init_method=f"file://{rdv}", rank=rank, world_size=2)
torch.npu.set_device(rank)
t = torch.full((3,), float(rank + 1), device=f"npu:{rank}")
dist.all_reduce(t)
out = torch.empty(6, device=f"npu:{rank}")
dist.all_gather_into_tensor(out, t * (rank + 1))
part = torch.empty(3, device=f"npu:{rank}")
dist.reduce_scatter_tensor(part, torch.arange(6.0, device=f"npu:{rank}") * (rank + 1))
# all-to-all with uneven splits (ALLTOALL's exchange): rank r sends r+1 rows to rank 0
sends = [rank + 1, 2 - rank]
recvs = [1, 2] if rank == 0 else [2, 1]
moved = torch.empty(sum(recvs), device=f"npu:{rank}")
dist.all_to_all_single(moved, torch.arange(3.0, device=f"npu:{rank}") + 10 * rank, recvs, sends)
lists = [torch.empty(1, device=f"npu:{rank}") for _ in range(2)]
dist.all_to_all(lists, [torch.full((1,), 10.0 * rank + d, device=f"npu:{rank}") for d in range(2)])
world = dist.group.WORLD
pair = dist.new_group([0, 1])
names = [g._get_backend(torch.device("npu")).get_hccl_comm_name(rank) for g in (world, pair)]
print(json.dumps({"sum": t.cpu().tolist(), "gather": out.cpu().tolist(),
                  "scatter": part.cpu().tolist(), "a2a": moved.cpu().tolist(),
                  "a2a_lists": [x.item() for x in lists], "names": names,
                  "backend": dist.get_backend(), "device": str(t.device)}))
dist.destroy_process_group()
"""


def test_hccl_collectives_across_two_processes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_EMULATED")}
    env.update(EMU)
    procs = [subprocess.Popen([sys.executable, "-c", HCCL_WORKER, str(rank),
                               str(tmp_path / "rdv")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in range(2)]
    r = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        r.append(json.loads(out.strip().splitlines()[-1]))
    # rank 0 holds 1s, rank 1 holds 2s: the sum is 3; the gather takes 3*1 and 3*2.
    assert [o["sum"] for o in r] == [[3.0, 3.0, 3.0]] * 2
    assert [o["gather"] for o in r] == [[3.0, 3.0, 3.0, 6.0, 6.0, 6.0]] * 2
    # reduce-scatter of arange(6) * 1 + arange(6) * 2 = 3 * arange(6), split in halves.
    assert [o["scatter"] for o in r] == [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]]
    assert [o["device"] for o in r] == ["npu:0", "npu:1"]
    assert {o["backend"] for o in r} == {"hccl"}
    # all_to_all_single: rank 0 sends [0] to itself and [1, 2] to rank 1; rank 1 sends
    # [10, 11] to rank 0 and [12] to itself.
    assert [o["a2a"] for o in r] == [[0.0, 10.0, 11.0], [1.0, 2.0, 12.0]]
    assert [o["a2a_lists"] for o in r] == [[0.0, 10.0], [1.0, 11.0]]
    # MC2's group name: one per communicator, the same on every rank of it
    assert r[0]["names"] == r[1]["names"] and len(set(r[0]["names"])) == 2


@pytest.fixture(scope="module")
def attention_report() -> dict[str, Any]:
    return run("""
        import json, torch, torch_npu
        torch.manual_seed(0)
        heads, kv_heads, d, bs, nblocks = 4, 2, 16, 128, 8
        q_lens, kv_lens = [3, 1, 2], [3, 6, 9]  # prefill, decode, chunked prefill w/ prefix
        T = sum(q_lens)
        q = torch.randn(T, heads, d).bfloat16()
        kc = torch.randn(nblocks, bs, kv_heads, d).bfloat16()
        vc = torch.randn(nblocks, bs, kv_heads, d).bfloat16()
        table = torch.tensor([[5], [1], [2]], dtype=torch.int32)
        ends = [3, 4, 6]
        out, lse = torch_npu.npu_fused_infer_attention_score(
            q.to("npu"), kc.to("npu").view(nblocks, bs, -1), vc.to("npu").view(nblocks, bs, -1),
            atten_mask=torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1).to("npu"),
            block_table=table.to("npu"), input_layout="TND", block_size=bs,
            actual_seq_lengths=ends, actual_seq_lengths_kv=kv_lens,
            num_key_value_heads=kv_heads, num_heads=heads, scale=d ** -0.5, sparse_mode=3)
        out = out.float()
        q, kc, vc = q.float(), kc.float(), vc.float()
        k = torch.arange(6.0).reshape(3, 1, 2)
        cache = torch.zeros(2, 2, 1, 2, device="npu")
        vcache = torch.zeros(2, 2, 1, 2, device="npu")
        torch_npu.npu_scatter_pa_kv_cache(k.to("npu"), (k + 10).to("npu"), cache, vcache,
                                          torch.tensor([3, 2, 0], device="npu"),
                                          cache_mode="Norm")
        accel = {}
        for name in ("get_memory_info", "memory_stats", "empty_cache"):
            try:
                getattr(torch.accelerator, name)()
                accel[name] = "ok"
            except RuntimeError as e:
                accel[name] = str(e)
        e1, e2 = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        e1.record(); e2.record(); e2.synchronize()
        print(json.dumps({
            "q": q.tolist(), "kc": kc.tolist(), "vc": vc.tolist(), "out": out.cpu().tolist(),
            "out_device": str(out.device), "cache": cache.cpu().tolist(),
            "vcache": vcache.cpu().tolist(), "accel": accel,
            "elapsed": e1.elapsed_time(e2),
            "pinned": torch.ones(2).pin_memory().is_pinned(),
        }))
    """, EMU)


def test_fia_is_causal_bottom_right_paged_gqa_attention(attention_report: dict[str, Any]) -> None:
    import math

    r = attention_report
    q, kc, vc, out = r["q"], r["kc"], r["vc"], r["out"]
    heads, kv_heads, d, bs = 4, 2, 16, 128
    q_lens, kv_lens, tables = [3, 1, 2], [3, 6, 9], [[5], [1], [2]]
    row = 0
    for b in range(3):
        for j in range(q_lens[b]):
            visible = kv_lens[b] - q_lens[b] + j + 1  # positions 0 .. seq_len - q_len + j
            for h in range(heads):
                g = h // (heads // kv_heads)
                keys = [kc[tables[b][p // bs]][p % bs][g] for p in range(visible)]
                vals = [vc[tables[b][p // bs]][p % bs][g] for p in range(visible)]
                s = [sum(a * c for a, c in zip(q[row][h], k, strict=True)) / math.sqrt(d)
                     for k in keys]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                expect = [sum(wi * v[i] for wi, v in zip(w, vals, strict=True)) / sum(w)
                          for i in range(d)]
                # bf16 output: 8 bits of mantissa
                assert out[row][h] == pytest.approx(expect, abs=2e-2, rel=1e-2)
            row += 1
    assert len(out) == 6
    assert r["out_device"] == "npu:0"


def test_scatter_writes_each_row_to_its_slot(attention_report: dict[str, Any]) -> None:
    # slot 3 = block 1 offset 1 gets row 0; slot 2 = block 1 offset 0 row 1; slot 0 row 2.
    assert attention_report["cache"] == [[[[4.0, 5.0]], [[0.0, 0.0]]],
                                         [[[2.0, 3.0]], [[0.0, 1.0]]]]
    assert attention_report["vcache"] == [[[[14.0, 15.0]], [[0.0, 0.0]]],
                                          [[[12.0, 13.0]], [[10.0, 11.0]]]]


def test_accelerator_memory_functions_fail_as_with_real_torch_npu(
    attention_report: dict[str, Any],
) -> None:
    # Real torch_npu's allocator is not a c10 DeviceAllocator either; the runtime rebinds
    # torch.accelerator's memory functions to torch.npu's (as the existing plugin does).
    for name, message in attention_report["accel"].items():
        assert "not a DeviceAllocator" in message, name


def test_events_time_and_pinned_memory_work(attention_report: dict[str, Any]) -> None:
    assert attention_report["elapsed"] >= 0.0
    assert attention_report["pinned"] is True


def test_atb_rotary_embedding_rotates_in_place_by_the_written_out_rope() -> None:
    """``torch_npu._npu_rotary_embedding`` (ATB schema): neox rope of whole heads, in place on
    2-D query/key, against cos/sin written out here; a CPU tensor raises as on hardware."""
    r = run("""
        import json, math, torch, torch_npu
        torch.manual_seed(0)
        T, H, KH, D = 3, 2, 1, 4
        pos = [0, 1, 5]
        cache = torch.tensor([[math.cos(p / 10000 ** (2 * i / D)) for i in range(D // 2)]
                              + [math.sin(p / 10000 ** (2 * i / D)) for i in range(D // 2)]
                              for p in range(8)])
        q, k = torch.randn(T, H * D).half(), torch.randn(T, KH * D).half()
        qn, kn = q.to("npu"), k.to("npu")
        got = torch_npu._npu_rotary_embedding(torch.tensor(pos).to("npu"), qn, kn, D,
                                              cache.half().to("npu"), True)
        q, k = q.float(), k.float()
        try:
            torch_npu._npu_rotary_embedding(torch.tensor(pos), q, k, D, cache, True)
            cpu = None
        except RuntimeError as e:
            cpu = str(e)
        print(json.dumps({"q": q.tolist(), "k": k.tolist(), "qo": qn.float().cpu().tolist(),
                          "ko": kn.float().cpu().tolist(), "ret": got, "cpu": cpu}))
    """, {"VLLM_ASCEND_EMULATED_NPUS": "1"})
    import math

    D = 4
    for src, out in ((r["q"], r["qo"]), (r["k"], r["ko"])):
        for t, p in enumerate([0, 1, 5]):
            for h in range(len(src[t]) // D):
                x = src[t][h * D:(h + 1) * D]
                expect = [0.0] * D
                for i in range(D // 2):
                    theta = p / 10000 ** (2 * i / D)
                    x1, x2 = x[i], x[i + D // 2]
                    expect[i] = x1 * math.cos(theta) - x2 * math.sin(theta)
                    expect[i + D // 2] = x2 * math.cos(theta) + x1 * math.sin(theta)
                assert out[t][h * D:(h + 1) * D] == pytest.approx(expect, abs=5e-3)
    assert r["ret"] is None
    assert "expected all tensors on npu" in r["cpu"]


def test_zeroed_hbm_reads_zero_and_costs_no_host_memory() -> None:
    """A 16 GiB zero-filled tensor on a 32 GiB NPU: accounted in full, zeros where read, and
    the host's resident memory grows by far less than its size (lazily backed pages)."""
    r = run("""
        import json, resource, torch, torch_npu
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        x = torch.zeros(16 * 2**30, dtype=torch.int8, device="npu")
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
        part = x[3: 3 * 2**20 + 5]
        part.fill_(7)
        filled = int(part.sum().cpu())
        part.zero_()
        print(json.dumps({"grown": grown, "free": torch.npu.mem_get_info()[0],
                          "filled": filled, "after": int(x[: 4 * 2**20].sum().cpu())}))
    """, {"VLLM_ASCEND_EMULATED_NPUS": "1"})
    assert r["grown"] < 2**30
    assert r["free"] <= 16 * GIB
    assert r["filled"] == 7 * (3 * 2**20 + 2)
    assert r["after"] == 0
