"""Host work per decode step on the emulated NPU: eager vs FULL_DECODE_ONLY vs PIECEWISE.

SmolLM2-135M-Instruct (bfloat16: attention runs through the fused-infer-attention kernel,
the only attention an NPU graph can hold) runs on the NPU runtime over the emulated `npu`
device, whose graphs replay the recorded kernels without the host. The emulation counts the device
operations the host dispatches outside replays and the device-to-host synchronisations
(`HostOpCounter`: host reads, copies to the host, `synchronize()`, `repeat_interleave` without
`output_size`). One decode step's count is the difference between a generation of
`1 + STEPS` tokens and one of 1 token (the prefill and sampling set-up cancel), divided by
`STEPS`. `Event.synchronize()` calls (vLLM's runner waits on its own events by design) are
listed in the notes, not counted as syncs. Capture counts and seconds come from the engine's
capture tally. Targets: a FULL decode step dispatches at most 5% of eager's operations from
the host (at batch 1 and 16), and synchronises with the device 0 times.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.table import Table

STEPS = 8
BATCHES = (1, 16)
TARGET = 0.05
DTYPE = "bfloat16"
NATIVE_ROPE = ["-RotaryEmbedding", "-Llama3RotaryEmbedding"]
#: label -> (compilation settings or None for eager mode).
MODES: dict[str, dict[str, Any] | None] = {
    "eager": None,
    "FULL_DECODE_ONLY": {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"},
    "PIECEWISE": {"cudagraph_mode": "PIECEWISE"},
}
PROMPT = "Write one sentence about the sea."


def run(quick: bool = False, model_dir: str | Path | None = None) -> list[Table]:
    """One table: per mode and batch, host ops per decode step, the ratio to eager, replays
    per step, and the mode's captures. ``quick``: batch 1, eager and FULL_DECODE_ONLY."""
    from vllm_ascend.checkpoints import smollm2_checkpoint
    from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs
    from vllm_ascend_testing.worker_client import LLMWorker

    model = str(model_dir or smollm2_checkpoint())
    batches = BATCHES[:1] if quick else BATCHES
    rows: list[list[Any]] = []
    per_step: dict[tuple[str, int], float] = {}
    syncs_per_step: dict[tuple[str, int], float] = {}
    sync_causes: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-graphs-") as tmp:
        root = Path(tmp)
        env = engine_env(device="npu", cache_root=root / "cache")
        env["VLLM_ASCEND_EMULATED_NPUS"] = "1"
        with LLMWorker(env, root / "graphs.log") as worker:
            modes = {k: v for k, v in MODES.items() if not quick or k != "PIECEWISE"}
            for label, graphs in modes.items():
                kwargs = llm_kwargs(model, compile=graphs is not None, dtype=DTYPE,
                                    max_model_len=256, max_num_seqs=max(batches),
                                    kv_cache_mib=128)
                compilation: dict[str, Any] = {"custom_ops": NATIVE_ROPE}
                if graphs is not None:
                    compilation.update(graphs, cudagraph_capture_sizes=list(batches))
                kwargs["compilation_config"] = compilation
                worker.request("load", name=label, kwargs=kwargs, timeout=1800)
                report = (worker.request("graph_report", name=label)["workers"][0]
                          if graphs is not None else {"captures": 0, "capture_s": 0.0})
                for batch in batches:
                    prompts = [PROMPT] * batch
                    worker.request("generate", name=label, prompts=prompts, max_tokens=2)
                    one = worker.request("host_ops", name=label, prompts=prompts, max_tokens=1)
                    many = worker.request("host_ops", name=label, prompts=prompts,
                                          max_tokens=1 + STEPS)
                    ops = (many["ops"] - one["ops"]) / STEPS
                    replays = (many["replays"] - one["replays"]) / STEPS
                    syncs = (many["syncs"] - one["syncs"]) / STEPS
                    waits = (many["event_waits"] - one["event_waits"]) / STEPS
                    per_step[(label, batch)] = ops
                    syncs_per_step[(label, batch)] = syncs
                    causes = {k: (n - one["sync_reasons"].get(k, 0)) / STEPS
                              for k, n in many["sync_reasons"].items()}
                    sync_causes[(label, batch)] = {k: v for k, v in causes.items() if v}
                    if waits:
                        sync_causes[(label, batch)]["Event.synchronize() (not in syncs)"] = waits
                    ratio = ops / per_step[("eager", batch)]
                    rows.append([label, batch, round(ops, 1), round(ratio, 4), replays,
                                 round(syncs, 2), report["captures"],
                                 round(report.get("capture_s", 0.0), 2)])
                worker.request("unload", name=label)
    full = [per_step[("FULL_DECODE_ONLY", b)] / per_step[("eager", b)] for b in batches]
    verdict = "met" if all(r <= TARGET for r in full) else "missed"
    full_syncs = [syncs_per_step[("FULL_DECODE_ONLY", b)] for b in batches]
    sync_verdict = "met" if all(s == 0 for s in full_syncs) else "missed"
    return [Table(
        "Host-dispatched device ops and device-to-host syncs per decode step (SmolLM2-135M "
        f"{DTYPE}, emulated NPU)",
        ["mode", "batch", "host ops / step", "vs eager", "replays / step", "syncs / step",
         "captures", "capture s"],
        rows,
        [f"target: FULL decode step <= {TARGET:.0%} of eager's host ops; FULL/eager = "
         + ", ".join(f"{r:.4f}" for r in full) + f": {verdict}",
         "target: 0 device-to-host syncs in a FULL_DECODE_ONLY decode step; FULL = "
         + ", ".join(f"{s:g}" for s in full_syncs) + f": {sync_verdict}",
         "per step by cause (besides device/stream synchronize() calls): "
         + "; ".join(f"{label} batch {batch}: {causes}"
                     for (label, batch), causes in sync_causes.items() if causes)],
    )]
