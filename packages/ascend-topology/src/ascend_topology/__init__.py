"""ascend_topology: read an Ascend host, plan CPU pools per NPU, bind processes to them.

Typical use (what vllm-ascend does in each worker)::

    facts = read_live_host()                 # or load_recorded_host(dir_or_example_name)
    p = plan(facts, PlanOptions())           # min CPUs per NPU: 3 on Ascend 950, else 5
    print(p.explain())                       # p.reason says why it cannot be applied
    report = apply(p, rank=local_rank)       # never raises; report.done / report.skipped

or all three steps at once: ``bind_worker(local_rank, PlanOptions(...))`` (never raises).
"""

from ascend_topology.apply import ApplyReport, apply, bind_worker
from ascend_topology.cpulist import MAX_CPU_ID, cpu_to_mask, format_cpu_list, parse_cpu_list
from ascend_topology.errors import (
    CommandError,
    ParseError,
    PlanError,
    RecordedHostError,
    TopologyError,
)
from ascend_topology.facts import SOCS, HostFacts
from ascend_topology.live import capture_live_host, read_live_host, threads_per_core
from ascend_topology.plan_types import NpuPlan, Plan, PlanOptions
from ascend_topology.planner import default_min_cpus_per_npu, plan
from ascend_topology.rc_mode import is_rc_device, read_lspci
from ascend_topology.recorded import example_host_dir, example_hosts, load_recorded_host
from ascend_topology.synthetic import make_synthetic_host

__version__ = "0.1.0"

__all__ = [
    "MAX_CPU_ID",
    "SOCS",
    "ApplyReport",
    "CommandError",
    "HostFacts",
    "NpuPlan",
    "ParseError",
    "Plan",
    "PlanError",
    "PlanOptions",
    "RecordedHostError",
    "TopologyError",
    "apply",
    "bind_worker",
    "capture_live_host",
    "cpu_to_mask",
    "default_min_cpus_per_npu",
    "example_host_dir",
    "example_hosts",
    "format_cpu_list",
    "is_rc_device",
    "load_recorded_host",
    "make_synthetic_host",
    "parse_cpu_list",
    "plan",
    "read_live_host",
    "read_lspci",
    "threads_per_core",
]
