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
from vllm_ascend.base.trusted_paths import UntrustedPathError
from vllm_ascend.compilation.compile_cache import (
    ENTRY_MAGIC,
    DamagedEntryError,
    read_entry,
    write_entry,
)
from vllm_ascend.compilation.compiler import PASS_KEY, AscendCompiler

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
    logger = logging.getLogger("vllm_ascend.compilation")
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


# --- the directories above the cache dir, and a swap after the check ------------------------

def _parent_others_can_swap(parent: Path, how: str) -> str:
    """Make ``parent`` (above the cache dir) a place another user could swap the cache dir in;
    the reason the compiler must give."""
    if how == "0777 without sticky":
        os.chmod(parent, 0o777)
        return f"{parent} (above the root) is writable by group or others without the sticky"
    if how == "group-writable":
        os.chmod(parent, 0o775)
        return "(mode 775)"
    os.chown(parent, NOBODY, NOBODY)  # "owned by another uid"
    return f"{parent} (above the root) is owned by uid {NOBODY}"


@pytest.mark.parametrize("how", [
    "0777 without sticky", "group-writable",
    pytest.param("owned by another uid", marks=needs_root)])
def test_a_cache_dir_below_a_directory_others_can_write_is_never_read(tmp_path, log, how):
    parent = tmp_path / "shared"
    parent.mkdir(mode=0o755)
    cache = parent / "cache"
    cache.mkdir(mode=0o700)  # the cache dir itself is private: only its parent is not
    reason = _parent_others_can_swap(parent, how)
    _refused_cache_dir(cache, tmp_path, log, reason)


def test_a_sticky_shared_directory_above_a_private_cache_dir_is_accepted(tmp_path, log):
    # The boundary: with the sticky bit (as /tmp), others cannot rename or remove the cache
    # dir this user owns, so it is used.
    parent = tmp_path / "sticky"
    parent.mkdir()
    os.chmod(parent, 0o1777)
    compiler, _ = compile_and_load(parent / "cache")
    assert compiler.caching and _warnings(log) == []
    assert (parent / "cache" / KEY).is_file()


@needs_root
def test_a_cache_dir_swapped_after_the_check_is_never_read(tmp_path, log):
    """The cache dir passed when the compiler was given it; the directory above it is then
    opened to another user, who swaps the cache dir for one holding a planted artifact. The
    next load checks again and never unpickles it."""
    parent = tmp_path / "shared"
    parent.mkdir(mode=0o755)
    cache = parent / "cache"
    marker = tmp_path / "payload-ran"
    gm = torch.fx.symbolic_trace(block)
    compiler = AscendCompiler(GraphFusionPassManager())
    compiler.initialize_cache(str(cache))
    assert compiler.caching and _warnings(log) == []
    # The other user's move: their own directory, holding a valid entry with a hostile pickle,
    # put where the cache dir was.
    os.chmod(parent, 0o777)
    cache.rename(parent / "old")
    planted = parent / "cache"
    planted.mkdir(mode=0o700)
    write_entry(planted / KEY, forged_artifact(marker))
    os.chown(planted / KEY, NOBODY, NOBODY)
    os.chown(planted, NOBODY, NOBODY)
    with torch.no_grad():
        loaded = compiler.load((KEY, str(planted / KEY)), gm, args(), 0, RANGE)
    assert not marker.exists() and not compiler.caching
    [warning] = _warnings(log)
    assert "compile cache off" in warning and "above the root" in warning
    assert_recompiled(compiler, loaded)
    assert sorted(p.name for p in planted.iterdir()) == [KEY]  # nothing written there either


def test_entries_are_read_from_the_directory_that_was_checked(tmp_path):
    """A swap between the check and the read changes nothing: the read goes through the
    descriptor of the directory that passed, not through its path again."""
    from vllm_ascend.base.trusted_paths import open_trusted_dir
    from vllm_ascend.compilation.compile_cache import decode_entry

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    write_entry(cache / KEY, b"checked")
    with open_trusted_dir(cache) as trusted:
        cache.rename(tmp_path / "moved")
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        write_entry(tmp_path / "elsewhere" / KEY, b"planted")
        (tmp_path / "cache").symlink_to(tmp_path / "elsewhere")
        assert decode_entry(trusted.read(KEY), trusted.path / KEY) == b"checked"
        trusted.write_atomic("new", b"x")
    assert (tmp_path / "moved" / "new").read_bytes() == b"x"
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == [KEY]
