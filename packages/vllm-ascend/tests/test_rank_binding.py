"""Per-rank CPU binding: the host-CPU rank plan handed to vLLM
(``config_pipeline.parallel_layout``), the worker hook, rank reports."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from vllm_ascend.base.config_channel import OMP_BIND_ENV, RANK_PLAN_ENV
from vllm_ascend.config_pipeline import parallel_layout
from vllm_ascend.process.process_setup import ProcessSetup
from vllm_ascend.worker_duties import cpu_binding


def parallel(tp: int = 2, pp: int = 1, dp_local: int = 1, dp_rank_local: int | None = None,
             backend: str = "mp", assigned: list[int] | None = None) -> SimpleNamespace:
    world = tp * pp
    return SimpleNamespace(
        tensor_parallel_size=tp, pipeline_parallel_size=pp, world_size=world,
        local_world_size=world, data_parallel_size_local=dp_local,
        data_parallel_rank_local=dp_rank_local, data_parallel_rank=dp_rank_local or 0,
        distributed_executor_backend=backend, assigned_physical_gpu_ids=assigned,
    )


def config(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(parallel_config=parallel(**kw))  # type: ignore[arg-type]


ON = SimpleNamespace(enable_cpu_binding=True)
OFF = SimpleNamespace(enable_cpu_binding=False)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch):
    """The OS readers of ascend-topology answer for a host of CPUs 0-3 on one NUMA node."""
    import ascend_topology.rank_hosts as rank_hosts

    def set_host(cpus: list[int], numa: dict[int, list[int]] | None = None) -> None:
        monkeypatch.setattr(rank_hosts, "read_allowed_cpus", lambda: list(cpus))
        monkeypatch.setattr(rank_hosts, "read_numa_sysfs", lambda: numa or {0: list(cpus)})

    set_host([0, 1, 2, 3])
    return set_host


# --- rank arithmetic -----------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "local_rank", "expected"), [
    ({"tp": 2}, 1, 1),
    ({"tp": 2, "dp_local": 2, "dp_rank_local": 1}, 0, 2),  # DP x (PP x TP) order
    ({"tp": 2, "pp": 2, "dp_local": 2, "dp_rank_local": 1}, 3, 7),
    ({"tp": 1, "dp_local": 2, "dp_rank_local": None}, 0, 0),
])
def test_host_rank_is_dp_major(kw: dict, local_rank: int, expected: int) -> None:
    assert cpu_binding.host_rank(parallel(**kw), local_rank) == expected


@pytest.mark.parametrize(("kw", "expected"), [
    ({"tp": 2}, 2), ({"tp": 2, "pp": 2}, 4), ({"tp": 1, "dp_local": 2}, 2),
    ({"tp": 2, "pp": 2, "dp_local": 2}, 8),
])
def test_local_rank_count(kw: dict, expected: int) -> None:
    assert cpu_binding.local_rank_count(parallel(**kw)) == expected


def test_worker_npu_prefers_vllms_assignment_then_visible_devices() -> None:
    assert cpu_binding.worker_npu(parallel(assigned=[6, 7]), 1, {}) == 7
    assert cpu_binding.worker_npu(parallel(), 1, {"ASCEND_RT_VISIBLE_DEVICES": "4, 5"}) == 5
    assert cpu_binding.worker_npu(parallel(), 1, {}) == 1


# --- the rank plan handed to vLLM (host-CPU platform) --------------------------------------

@pytest.mark.parametrize(("kw", "expected"), [
    ({"tp": 2}, "0-1|2-3"),
    ({"tp": 4}, "0|1|2|3"),  # at the limit: one CPU each
    ({"tp": 1, "dp_local": 2}, "0-1|2-3"),  # two DP engines of one worker each
    ({"tp": 1, "backend": "ray"}, "0-3"),
])
def test_plan_is_handed_to_vllm_as_omp_lists(host, kw: dict, expected: str) -> None:
    env: dict[str, str] = {}
    line = parallel_layout.hand_rank_plan(config(**kw), ON, env)
    assert env[OMP_BIND_ENV] == expected, line
    assert json.loads(env[RANK_PLAN_ENV])["omp"] == expected
    assert cpu_binding.handed_rank_plan(env) is not None


def test_more_ranks_than_cpus_keeps_vllms_behaviour_with_a_warning(host, caplog) -> None:
    env: dict[str, str] = {}
    line = parallel_layout.hand_rank_plan(config(tp=5), ON, env)  # just above the limit
    assert line.startswith("CPU binding skipped: 5 local ranks cannot get a CPU pool each")
    assert env == {}


def test_user_setting_wins_with_one_info_line(host, caplog) -> None:
    env = {OMP_BIND_ENV: "3|2"}
    with caplog.at_level("INFO", logger="vllm_ascend.config_pipeline.parallel_layout"):
        line = parallel_layout.hand_rank_plan(config(tp=2), ON, env)
    assert env == {OMP_BIND_ENV: "3|2"}
    assert line == f"CPU binding: {OMP_BIND_ENV}='3|2' set by the user is used as given"
    assert [r.getMessage() for r in caplog.records] == [line]


def test_own_plan_is_replanned_not_mistaken_for_the_users(host) -> None:
    env: dict[str, str] = {}
    parallel_layout.hand_rank_plan(config(tp=2), ON, env)
    parallel_layout.hand_rank_plan(config(tp=4), ON, env)  # a second engine in the process
    assert env[OMP_BIND_ENV] == "0|1|2|3"


@pytest.mark.parametrize(("resolved", "kw"), [(OFF, {"tp": 2}), (ON, {"tp": 1, "backend": "uni"})])
def test_disabled_or_in_process_worker_removes_only_the_plugins_plan(host, resolved, kw) -> None:
    env: dict[str, str] = {}
    parallel_layout.hand_rank_plan(config(tp=2), ON, env)
    parallel_layout.hand_rank_plan(config(**kw), resolved, env)
    assert env == {}
    user = {OMP_BIND_ENV: "0|1"}
    parallel_layout.hand_rank_plan(config(**kw), resolved, user)
    assert user == {OMP_BIND_ENV: "0|1"}


def test_a_changed_omp_value_means_the_plan_is_no_longer_handed(host) -> None:
    env: dict[str, str] = {}
    parallel_layout.hand_rank_plan(config(tp=2), ON, env)
    env[OMP_BIND_ENV] = "0|1"
    assert cpu_binding.handed_rank_plan(env) is None
    assert cpu_binding.handed_rank_plan({RANK_PLAN_ENV: "not json", OMP_BIND_ENV: "x"}) is None


# --- the worker hook --------------------------------------------------------------------------

def test_host_cpu_worker_binds_its_pool_and_threads(py_runner, make_env, tmp_path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    code = f"""
        import json, os, torch
        from ascend_topology.rank_hosts import plan_rank_pools
        from vllm_ascend.config_pipeline.parallel_layout import omp_lists
        from vllm_ascend.base.config_channel import RANK_PLAN_ENV
        from vllm_ascend.worker_duties.cpu_binding import bind_host_cpu_worker
        plan = plan_rank_pools(2, {allowed!r}, {{0: {allowed!r}}})
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = omp_lists(plan)
        os.environ[RANK_PLAN_ENV] = json.dumps({{"omp": omp_lists(plan), "plan": plan.to_dict()}})
        b = bind_host_cpu_worker(1)
        print("RESULT " + json.dumps({{"cpus": sorted(os.sched_getaffinity(0)),
              "bound": list(b.cpus), "threads": torch.get_num_threads(), "lines": b.lines}}))
    """
    result = py_runner(code, make_env(tmp_path))
    half = len(allowed) // 2
    assert result["cpus"] == allowed[half:]  # rank 1 of 2: the upper half
    assert result["bound"] == allowed[half:]
    assert result["threads"] == len(allowed) - half
    assert "threads -> main CPUs" in result["lines"][0], result["lines"]


def test_host_cpu_worker_without_a_handed_plan_changes_nothing() -> None:
    before = os.sched_getaffinity(0)
    binding = cpu_binding.bind_host_cpu_worker(0, {OMP_BIND_ENV: "0|1"})
    assert binding.index is None and binding.cpus == ()
    assert binding.lines == ["CPU binding left to vLLM: no plan of this plugin was handed to "
                             "the CPU workers"]
    assert os.sched_getaffinity(0) == before


def test_host_rank_outside_the_plan_is_skipped(host) -> None:
    env: dict[str, str] = {}
    parallel_layout.hand_rank_plan(config(tp=2), ON, env)
    binding = cpu_binding.bind_host_cpu_worker(2, env)  # ranks 0 and 1 only
    assert binding.lines == ["CPU binding skipped: host rank 2 is outside the plan of 2 ranks"]


def test_npu_worker_without_npu_smi_keeps_its_affinity(monkeypatch) -> None:
    import ascend_topology as topo

    monkeypatch.setenv("PATH", "/nonexistent")
    before = os.sched_getaffinity(0)
    binding = cpu_binding.bind_npu_worker(0, topo.PlanOptions(), "A2",
                                          ProcessSetup().cross_check_soc)
    assert binding.index is None
    assert binding.lines[0].startswith("CPU binding skipped: npu-smi was not found on PATH")
    assert binding.bind_late_threads() == []
    assert os.sched_getaffinity(0) == before


@pytest.fixture
def _engine(monkeypatch, make_engine):
    monkeypatch.delenv(RANK_PLAN_ENV, raising=False)
    return lambda _monkeypatch, soc, additional=None: make_engine(soc, additional)


def test_hook_honours_enable_cpu_binding_false(monkeypatch, _engine) -> None:
    from vllm_ascend.process.process_setup import current_process_setup
    from vllm_ascend.worker_duties.duties import bind_rank

    off = _engine(monkeypatch, "A2", {"enable_cpu_binding": False})
    binding = bind_rank(config(), 0, off, current_process_setup())
    assert binding.lines == ["CPU binding disabled by additional_config.enable_cpu_binding"]
    assert current_process_setup().cpu_binding == binding.lines


def test_hook_on_the_npu_platform_plans_for_the_workers_npu(monkeypatch, fake_torch_npu,
                                                            _engine) -> None:
    from vllm_ascend.worker_duties.duties import bind_rank

    monkeypatch.setenv("PATH", "/nonexistent")
    binding = bind_rank(config(assigned=[3, 4]), 1, _engine(monkeypatch, "A2"), ProcessSetup())
    assert binding.lines[0].startswith("CPU binding skipped: npu-smi was not found")


def test_hook_on_the_host_cpu_platform_uses_the_handed_plan(monkeypatch, _engine) -> None:
    from vllm_ascend.worker_duties.duties import bind_rank

    cpu = _engine(monkeypatch, "cpu")
    monkeypatch.setenv(OMP_BIND_ENV, "0")
    binding = bind_rank(config(tp=1), 0, cpu, ProcessSetup())
    assert binding.lines[0].startswith("CPU binding left to vLLM")


# --- rank reports -----------------------------------------------------------------------------

def test_rank_reports_round_trip_atomically(tmp_path) -> None:
    from vllm_ascend.worker_duties.rank_report import (
        REPORT_DIR_ENV,
        read_rank_reports,
        write_rank_report,
    )

    directory = tmp_path / "reports"
    env = {REPORT_DIR_ENV: str(directory)}
    first = {"dp_rank": 1, "rank": 0, "fusion": {"qknorm_rope": 2}}
    path = write_rank_report(first, env)
    assert path == directory / "dp1-rank0.json"
    write_rank_report({"dp_rank": 0, "rank": 1, "fusion": {}}, env)
    write_rank_report({**first, "fusion": {"qknorm_rope": 3}}, env)  # replaced, not appended
    reports = read_rank_reports(directory)
    assert sorted(reports) == [(0, 1), (1, 0)]
    assert reports[(1, 0)]["fusion"] == {"qknorm_rope": 3}
    assert [p.name for p in directory.iterdir() if p.name.startswith(".")] == []
    assert oct(directory.stat().st_mode & 0o777) == "0o700"


def test_rank_report_without_a_directory_or_writable_place(tmp_path, caplog) -> None:
    from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, write_rank_report

    assert write_rank_report({"dp_rank": 0, "rank": 0}, {}) is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert write_rank_report({"dp_rank": 0, "rank": 0}, {REPORT_DIR_ENV: str(blocker)}) is None
    assert "rank report not written" in caplog.text


def test_host_cpu_platform_places_ranks_on_npu_slots_in_ray() -> None:
    from vllm_ascend.platform.cpu import AscendCpuPlatform
    from vllm_ascend.platform.npu import NPUPlatform

    assert AscendCpuPlatform.ray_device_key == NPUPlatform.ray_device_key == "NPU"
    assert AscendCpuPlatform.ray_noset_device_env_vars == [
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]


def test_cli_help_lists_serve() -> None:
    from vllm_ascend.entrypoints.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "serve vLLM's OpenAI-compatible server with the Ascend plugin (every `vllm serve` " \
        "option" in text


def test_rank_report_names_the_engines_dp_rank_for_dense_models() -> None:
    from vllm_ascend.worker_duties.rank_report import build_rank_report

    cfg = config(tp=1, dp_local=1, dp_rank_local=1)
    # vLLM's independent DP engine of a dense model: data_parallel_rank reset to 0, the
    # engine's DP rank kept in data_parallel_index.
    cfg.parallel_config.data_parallel_rank = 0
    cfg.parallel_config.data_parallel_index = 1
    binding = cpu_binding.WorkerBinding(0, lines=["x"])
    report = build_rank_report(cfg, rank=0, local_rank=0, binding=binding, stage="device")
    assert (report["dp_rank"], report["rank"], report["host_rank"]) == (1, 0, 1)
    assert report["binding"] == ["x"] and report["bound_cpus"] == []
    assert report["cpus_allowed"] == sorted(os.sched_getaffinity(0))


def test_rank_report_of_an_npu_worker_keeps_its_host_rank_and_names_its_npu() -> None:
    """The NPU worker's local rank becomes its device index (npu:1 for DP rank 1 with TP=1);
    the host rank is still local DP rank x local world + the rank vLLM gave it (1 x 1 + 0)."""
    from vllm_ascend.worker_duties.rank_report import build_rank_report

    cfg = config(tp=1, dp_local=2, dp_rank_local=1)
    cfg.parallel_config.data_parallel_index = 1
    binding = cpu_binding.WorkerBinding(1, soc="A2", npu=1, lines=["skipped: too small"])
    binding.plan = SimpleNamespace(npus=(SimpleNamespace(npu=0, cpus=(0,)),
                                         SimpleNamespace(npu=1, cpus=(1,))))  # type: ignore
    report = build_rank_report(cfg, rank=0, local_rank=1, binding=binding, stage="device",
                               engine_local_rank=0, device="npu:1")
    assert (report["host_rank"], report["local_rank"], report["device"]) == (1, 1, "npu:1")
    assert (report["npu"], report["planned_pool"], report["bound_cpus"]) == (1, [1], [])


def test_the_npu_the_worker_names_wins_over_the_rank_arithmetic(monkeypatch) -> None:
    """``bind_this_worker(npu=...)``: the pool planned is that NPU's, not the one the local rank
    would index (the NPU worker knows its NPU from vLLM's device map)."""
    seen = {}

    def bind(local_rank, options, soc, cross_check, *, npu=None, environ=None):
        seen["npu"] = npu
        return cpu_binding.WorkerBinding(local_rank, soc=soc, npu=npu)

    monkeypatch.setattr(cpu_binding, "bind_npu_worker", bind)
    cfg = SimpleNamespace(enable_cpu_binding=True, cpu_binding_config=SimpleNamespace(
        min_cpus_per_npu=None, bind_irq=False, migrate_memory=False))
    check = lambda soc, smi: None  # noqa: E731
    cpu_binding.bind_this_worker(parallel(tp=1, assigned=[1]), 1, "A2", cfg, check, {}, npu=1)
    assert seen["npu"] == 1
    cpu_binding.bind_this_worker(parallel(tp=1, assigned=[6]), 0, "A2", cfg, check, {})
    assert seen["npu"] == 6
