"""The NPU runtime's accelerator-memory binding, on the emulated device in a fresh interpreter
(``torch.accelerator``'s memory calls assert for torch_npu's allocator, as on real hardware)."""

from __future__ import annotations

from torch_npu_double.fresh_interpreter import run_json

GIB = 2**30
EMU = {"VLLM_ASCEND_EMULATED_NPUS": "2", "VLLM_ASCEND_EMULATED_HBM_GIB": "0.25"}


def test_the_npu_runtime_binds_accelerator_memory_to_torch_npu_for_the_process() -> None:
    """vllm_ascend's binding: the accelerator memory calls that assert for torch_npu's
    allocator answer with torch.npu's numbers afterwards (and binding twice changes nothing)."""
    r = run_json("""
        import json, torch, torch_npu
        from vllm_ascend.npu_runtime.bindings import bind_accelerator_memory
        try:
            torch.accelerator.empty_cache()
            before = None
        except RuntimeError as e:
            before = str(e)
        bound = bind_accelerator_memory()
        first = torch.accelerator.get_memory_info
        bind_accelerator_memory()
        x = torch.empty(2**20, dtype=torch.uint8, device="npu")
        torch.accelerator.empty_cache()
        print(json.dumps({"before": before, "bound": bound,
                          "same": torch.accelerator.get_memory_info is first,
                          "info": list(torch.accelerator.get_memory_info()),
                          "npu_info": list(torch.npu.mem_get_info()),
                          "allocated": torch.accelerator.memory_allocated(),
                          "npu_allocated": torch.npu.memory_allocated()}))
    """, EMU)
    assert "not a DeviceAllocator" in r["before"]
    assert r["bound"] is True and r["same"] is True
    assert r["info"] == r["npu_info"] and r["info"][1] == GIB // 4
    assert r["allocated"] == r["npu_allocated"] >= 2**20
