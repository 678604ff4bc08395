"""compile_cache: AscendCompiler never unpickles an artifact from a cache dir another user
could write, and rebuilds a damaged one.

Each test plants a file whose unpickling would create a marker file (what a hostile payload
would do instead), then shows the marker never appears, the compiler says why, and the result
is compiled again with the passes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
from pathlib import Path

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend)
import pytest
import torch
from ascend_graph import GraphFusionPassManager
from vllm.config.utils import Range
from vllm_ascend.compilation.compile_cache import (
    ENTRY_MAGIC,
    DamagedEntryError,
    read_entry,
    write_entry,
)
from vllm_ascend.compilation.compiler import PASS_KEY, AscendCompiler
from vllm_ascend.runtime.trusted_paths import UntrustedPathError

A = torch.ops.ascend
RANGE = Range(start=1, end=16)
KEY = "artifact_compile_range_1_16_subgraph_0"
NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="planting a file owned by another uid needs root (chown)")


def block(x, residual, w):
    y, res = A.add_rms_norm(x, residual, w, 1e-6)
    return y, res * 2.5 + x


def args(tokens: int = 4) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(tokens)
    return [torch.randn(tokens, 32, generator=gen), torch.randn(tokens, 32, generator=gen),
            torch.rand(32, generator=gen) + 0.5]


class Payload:
    """Unpickling this touches ``marker``: the stand-in for code a planted pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def forged_artifact(marker: Path) -> bytes:
    """A genuine artifact's header (versions, pass-manager uuid, range: all public) with a
    hostile pickle and its correct sha256: anyone can write one."""
    from ascend_graph.fused_graph import MAGIC, FusedGraph, dumps_fused_graph

    genuine = dumps_fused_graph(FusedGraph("", torch.fx.symbolic_trace(block)),
                                manager=GraphFusionPassManager(), backend="eager",
                                compile_range=RANGE)
    header = json.loads(genuine[len(MAGIC):].partition(b"\n")[0])
    payload = pickle.dumps(Payload(marker))
    header["sha256"] = hashlib.sha256(payload).hexdigest()
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def test_the_forged_artifact_runs_its_payload_in_the_plain_loader(tmp_path):
    """Why only a trusted cache dir is read: ascend-graph's loader checks only public fields,
    so whoever can write the directory can run code in this process."""
    from ascend_graph import FusedGraphError, loads_fused_graph

    marker = tmp_path / "payload-ran"
    with pytest.raises(FusedGraphError, match="payload is not a graph"):
        loads_fused_graph(forged_artifact(marker), manager=GraphFusionPassManager(),
                          backend="eager", compile_range=RANGE)
    assert marker.exists()


@pytest.fixture
def cache(tmp_path) -> Path:
    """A cache dir private to this user."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    return folder


class Records(logging.Handler):
    """The compiler logger's records (the plugin's loggers may not propagate to pytest's)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def clear(self) -> None:
        self.records.clear()


@pytest.fixture
def log():
    logger = logging.getLogger("vllm_ascend.compilation.compiler")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def compile_and_load(cache: Path) -> tuple[AscendCompiler, object]:
    gm = torch.fx.symbolic_trace(block)
    compiler = AscendCompiler(GraphFusionPassManager())
    compiler.initialize_cache(str(cache))
    with torch.no_grad():
        loaded = compiler.load((KEY, str(cache / KEY)), gm, args(), 0, RANGE)
    return compiler, loaded


def warnings_about(log, path: Path) -> list[str]:
    return [r.getMessage() for r in log.records
            if r.levelno == logging.WARNING and str(path) in r.getMessage()]


def assert_recompiled(compiler: AscendCompiler, loaded) -> None:
    assert compiler.fusion_manager.counts["muls_add"] == 1  # the passes ran again
    with torch.no_grad():
        got, want = loaded(*args(6)), block(*args(6))
    assert torch.equal(got[0], want[0]) and torch.allclose(got[1], want[1])


def _warnings(log) -> list[str]:
    return [r.getMessage() for r in log.records if r.levelno == logging.WARNING]


def _refused_cache_dir(cache: Path, tmp_path: Path, log, reason: str,
                       where: Path | None = None) -> None:
    """A valid entry holding a hostile pickle in ``cache``: never unpickled, caching off with
    one warning, the graph compiled again and nothing written there."""
    marker = tmp_path / "payload-ran"
    write_entry(cache / KEY, forged_artifact(marker))
    before = sorted(p.name for p in cache.iterdir())
    compiler, loaded = compile_and_load(where or cache)
    assert not marker.exists() and not compiler.caching
    [warning] = _warnings(log)
    assert "compile cache off" in warning and reason in warning
    assert_recompiled(compiler, loaded)
    gm = torch.fx.symbolic_trace(block)
    with torch.no_grad():
        _, handle = compiler.compile(gm, args(), {PASS_KEY: GraphFusionPassManager()}, RANGE, KEY)
    assert handle is None and sorted(p.name for p in cache.iterdir()) == before


@needs_root
def test_a_cache_dir_another_user_owns_is_never_read(cache, tmp_path, log):
    os.chown(cache, NOBODY, NOBODY)
    _refused_cache_dir(cache, tmp_path, log, f"owned by uid {NOBODY}")


def test_a_cache_dir_others_can_write_is_never_read(cache, tmp_path, log):
    os.chmod(cache, 0o777)  # anyone could have planted files here
    _refused_cache_dir(cache, tmp_path, log, "writable by group or others")


@needs_root
def test_a_cache_dir_reached_through_another_users_symlink_is_never_read(cache, tmp_path,
                                                                         log):
    link = tmp_path / "link"
    link.symlink_to(cache)
    os.lchown(link, NOBODY, NOBODY)
    _refused_cache_dir(cache, tmp_path, log, f"link is a symlink owned by uid {NOBODY}",
                       where=link)


def test_a_refused_cache_dir_warns_once_per_process(cache, log):
    os.chmod(cache, 0o777)
    for _ in range(3):
        AscendCompiler().initialize_cache(str(cache))
    assert len(_warnings(log)) == 1


def test_symlink_and_fifo_artifacts_are_rejected(cache, tmp_path, log):
    marker = tmp_path / "payload-ran"
    elsewhere = tmp_path / "elsewhere"
    write_entry(elsewhere, forged_artifact(marker))
    cases = {
        "symlink": lambda p: p.symlink_to(elsewhere),
        "fifo": lambda p: os.mkfifo(p, 0o600),
    }
    for name, plant in cases.items():
        path = cache / KEY
        plant(path)
        log.clear()
        compiler, loaded = compile_and_load(cache)  # a FIFO would block a plain read
        assert not marker.exists(), name
        [warning] = warnings_about(log, path)
        assert {"symlink": "is a symlink", "fifo": "not a regular file"}[name] in warning
        assert_recompiled(compiler, loaded)
        path.unlink()


@pytest.mark.parametrize("damage", ["flipped byte", "no header"])
def test_a_damaged_artifact_is_rebuilt_with_one_warning(cache, log, damage):
    compile_and_load(cache)  # writes the artifact
    data = (cache / KEY).read_bytes()
    if damage == "flipped byte":
        (cache / KEY).write_bytes(data[:-20] + bytes([data[-20] ^ 0xFF]) + data[-19:])
    else:
        (cache / KEY).write_bytes(data.partition(b"\n")[2])  # the bare fused graph
    log.clear()
    compiler, loaded = compile_and_load(cache)
    [warning] = warnings_about(log, cache / KEY)
    reason = {"flipped byte": "does not match its sha256",
              "no header": "is not a vllm-ascend cache entry"}[damage]
    assert "rejected" in warning and reason in warning
    assert_recompiled(compiler, loaded)
    log.clear()
    again, _ = compile_and_load(cache)  # written anew: the next start loads it
    assert sum(again.fusion_manager.counts.values()) == 0 and _warnings(log) == []


def test_entries_carry_the_sha256_of_their_payload(tmp_path):
    path = tmp_path / "entry"
    write_entry(path, b"graph")
    digest = hashlib.sha256(b"graph").hexdigest().encode()
    assert path.read_bytes() == ENTRY_MAGIC + digest + b"\ngraph"  # the format, written out
    assert read_entry(path) == b"graph"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_entry(path, limit=len(path.read_bytes())) == b"graph"  # at the bound
    with pytest.raises(UntrustedPathError, match="over the"):
        read_entry(path, limit=len(path.read_bytes()) - 1)
    path.write_bytes(ENTRY_MAGIC + digest + b"\ngraphs")
    with pytest.raises(DamagedEntryError, match="does not match its sha256"):
        read_entry(path)
