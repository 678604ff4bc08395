"""AscendCompiler never unpickles an artifact someone else could have written.

Each test plants a file whose unpickling would create a marker file (what a hostile payload
would do instead), then shows the marker never appears, the compiler says which file it
rejected, and the result is compiled again with the passes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import secrets
from pathlib import Path

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend)
import pytest
import torch
from ascend_graph import GraphFusionPassManager
from vllm.config.utils import Range
from vllm_ascend.compilation.artifact_signing import ArtifactSigner, load_signer
from vllm_ascend.compilation.compiler import PASS_KEY, AscendCompiler
from vllm_ascend.runtime.trusted_paths import (
    UntrustedPathError,
    check_trusted_dir,
    read_trusted_file,
)

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


def test_the_forged_artifact_runs_its_payload_in_the_unsigned_loader(tmp_path):
    """Why signatures are needed: ascend-graph's own loader checks only public fields."""
    from ascend_graph import FusedGraphError, loads_fused_graph

    marker = tmp_path / "payload-ran"
    with pytest.raises(FusedGraphError, match="payload is not a graph"):
        loads_fused_graph(forged_artifact(marker), manager=GraphFusionPassManager(),
                          backend="eager", compile_range=RANGE)
    assert marker.exists()


@pytest.fixture
def roots(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(cache dir, cache root holding the signing key), both private to this user."""
    cache_root = tmp_path / "root"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache_root))
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    return cache, cache_root


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


def compile_and_load(cache: Path, cache_root: Path) -> tuple[AscendCompiler, object]:
    gm = torch.fx.symbolic_trace(block)
    compiler = AscendCompiler(GraphFusionPassManager())
    compiler.initialize_cache(str(cache), cache_root=str(cache_root))
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


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed-with-our-key"])
@needs_root
def test_artifact_owned_by_another_user_is_never_unpickled(roots, tmp_path, log, signed):
    cache, cache_root = roots
    marker = tmp_path / "payload-ran"
    data = forged_artifact(marker)
    if signed:  # even a valid signature does not make another user's file ours
        data = load_signer(cache_root).sign(data)
    (cache / KEY).write_bytes(data)
    os.chmod(cache / KEY, 0o600)
    os.chown(cache / KEY, NOBODY, NOBODY)
    compiler, loaded = compile_and_load(cache, cache_root)
    assert not marker.exists()
    [warning] = warnings_about(log, cache / KEY)
    assert "rejected" in warning and f"owned by uid {NOBODY}" in warning
    assert_recompiled(compiler, loaded)


@pytest.mark.parametrize("key", ["none", "another user's key"])
def test_artifact_without_our_signature_is_never_unpickled(roots, tmp_path, log, key):
    cache, cache_root = roots
    marker = tmp_path / "payload-ran"
    data = forged_artifact(marker)
    if key != "none":
        data = ArtifactSigner(secrets.token_bytes(32)).sign(data)
    (cache / KEY).write_bytes(data)
    os.chmod(cache / KEY, 0o600)
    compiler, loaded = compile_and_load(cache, cache_root)
    assert not marker.exists()
    [warning] = warnings_about(log, cache / KEY)
    reason = "not signed by vllm-ascend" if key == "none" else "does not match this user's key"
    assert reason in warning
    assert_recompiled(compiler, loaded)
    # The rejected file was replaced by our own signed artifact: the next start loads it.
    again, _ = compile_and_load(cache, cache_root)
    assert sum(again.fusion_manager.counts.values()) == 0


def test_symlink_fifo_and_group_writable_artifacts_are_rejected(roots, tmp_path, log):
    cache, cache_root = roots
    marker = tmp_path / "payload-ran"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(load_signer(cache_root).sign(forged_artifact(marker)))
    cases = {
        "symlink": lambda p: p.symlink_to(elsewhere),
        "fifo": lambda p: os.mkfifo(p, 0o600),
        "group-writable": lambda p: (p.write_bytes(elsewhere.read_bytes()), os.chmod(p, 0o664)),
    }
    for name, plant in cases.items():
        path = cache / KEY
        plant(path)
        log.clear()
        compiler, loaded = compile_and_load(cache, cache_root)  # a FIFO would block a plain read
        assert not marker.exists(), name
        [warning] = warnings_about(log, path)
        assert {"symlink": "is a symlink", "fifo": "not a regular file",
                "group-writable": "writable by group or others"}[name] in warning
        assert_recompiled(compiler, loaded)
        path.unlink()


def test_untrusted_cache_dir_turns_the_cache_off(roots, tmp_path, log):
    cache, cache_root = roots
    marker = tmp_path / "payload-ran"
    (cache / KEY).write_bytes(load_signer(cache_root).sign(forged_artifact(marker)))
    os.chmod(cache, 0o777)  # anyone could have planted files here
    compiler, loaded = compile_and_load(cache, cache_root)
    assert not marker.exists() and not compiler.caching
    [warning] = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    assert "compile cache off" in warning and "writable by group or others" in warning
    assert_recompiled(compiler, loaded)
    gm = torch.fx.symbolic_trace(block)
    with torch.no_grad():
        _, handle = compiler.compile(gm, args(), {PASS_KEY: GraphFusionPassManager()}, RANGE, KEY)
    assert handle is None and sorted(p.name for p in cache.iterdir()) == [KEY]  # nothing written


def test_untrusted_signing_key_turns_the_cache_off(roots, log):
    cache, cache_root = roots
    load_signer(cache_root)
    os.chmod(cache_root / "ascend" / "artifact.key", 0o666)
    compiler, _ = compile_and_load(cache, cache_root)
    assert not compiler.caching
    [warning] = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    assert "artifact.key is writable by group or others" in warning


def test_one_key_per_cache_root_made_once_with_mode_0600(tmp_path):
    first, second = load_signer(tmp_path), load_signer(tmp_path)
    key = tmp_path / "ascend" / "artifact.key"
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert os.stat(key.parent).st_mode & 0o777 == 0o700
    assert second.verify(first.sign(b"graph")) == b"graph"
    assert sorted(p.name for p in key.parent.iterdir()) == ["artifact.key"]  # no temp files
    key.write_bytes(b"short")
    with pytest.raises(UntrustedPathError, match="holds 5 bytes, not a 32-byte key"):
        load_signer(tmp_path)


def test_trusted_dir_rules(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    assert check_trusted_dir(private) == private  # 0755 is fine: only the owner writes
    os.chmod(private, 0o775)
    with pytest.raises(UntrustedPathError, match=r"writable by group or others \(mode 775\)"):
        check_trusted_dir(private)
    os.chmod(private, 0o700)
    inner = private / "inner"
    inner.mkdir()
    os.chmod(private, 0o757)  # an ancestor others can write: they could swap `inner`
    with pytest.raises(UntrustedPathError, match="private is writable by group or others"):
        check_trusted_dir(inner)
    os.chmod(private, 0o700)
    link = tmp_path / "link"
    link.symlink_to(private)
    with pytest.raises(UntrustedPathError, match="link is a symlink"):
        check_trusted_dir(link)
    # /tmp itself is world-writable but sticky and root-owned: fine as an ancestor.
    assert str(tmp_path).startswith("/tmp") and check_trusted_dir(private) == private


def test_reads_are_bounded(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    os.chmod(path, 0o600)
    assert read_trusted_file(path, limit=100) == b"x" * 100
    with pytest.raises(UntrustedPathError, match="is 100 bytes, over the 99-byte limit"):
        read_trusted_file(path, limit=99)


@needs_root
def test_directory_owned_by_another_user_is_untrusted(tmp_path):
    other = tmp_path / "other"
    other.mkdir(mode=0o755)
    os.chown(other, NOBODY, NOBODY)
    with pytest.raises(UntrustedPathError, match=f"owned by uid {NOBODY}"):
        check_trusted_dir(other)
