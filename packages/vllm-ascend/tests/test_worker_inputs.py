"""worker_inputs: the engine side's resolution inputs reach workers through a private file, so
a large quantization description never makes an environment string exec refuses."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

ARG_STRLEN_LIMIT = 32 * 4096  # Linux's MAX_ARG_STRLEN: 32 pages per environment string


@pytest.fixture(scope="module")
def quant_llama_80(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model

    return make_tiny_quant_model("llama", tmp_path_factory.mktemp("q80") / "llama",
                                 scheme="w8a8", layers=80, hidden=64, head_dim=32)


def test_an_80_layer_w8a8_publication_keeps_exec_working_and_reaches_spawned_children(
    ascend_cpu_platform, quant_llama_80: Path
) -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV, published_inputs

    description = json.loads((quant_llama_80 / "quant_model_description.json").read_text())
    assert len(json.dumps(description)) > ARG_STRLEN_LIMIT  # the case that broke exec
    EngineArgs(model=str(quant_llama_80), load_format="dummy", dtype="float32",
               max_model_len=128).create_engine_config()  # the platform publishes
    # Every later exec of this process, with its whole environment inherited.
    assert subprocess.run(["true"], check=False).returncode == 0
    assert len(os.environ[WORKER_INPUTS_ENV]) < 4096
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        child = pool.apply(published_inputs)
    parent = published_inputs()
    assert child == parent and child is not None
    assert child["soc"] == "cpu" and child["additional_config"] == {}
    assert child["facts"]["quant_description"] == {"quant_method": "ascend", **description}


def test_published_file_is_private_atomic_and_shared_by_equal_inputs(tmp_path: Path) -> None:
    from vllm_ascend.base.worker_inputs import encode_inputs, inputs_dir, write_inputs

    inputs = {"soc": "cpu", "additional_config": {"a": 1}, "facts": {}, "environ": {}}
    data = encode_inputs(inputs)
    first = write_inputs(data)
    assert first.parent == inputs_dir()
    assert first.name == hashlib.sha256(data).hexdigest() + ".json"
    assert first.read_bytes() == data and json.loads(data) == inputs
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    assert write_inputs(data) == first  # equal inputs: the same file
    # A damaged file under the right name is replaced, never reused.
    first.write_bytes(data[:-1])
    assert write_inputs(data) == first and first.read_bytes() == data
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_group_writable_inputs_root_is_replaced_by_a_private_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from vllm_ascend.base.worker_inputs import inputs_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"vllm-ascend-{os.geteuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.base.worker_inputs"):
        chosen = inputs_dir()
    assert chosen.parent == tmp_path and chosen.name.startswith("vllm-ascend-worker-inputs-")
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700 and not list(shared.iterdir())
    assert f"not using {shared / 'worker-inputs'}" in caplog.text


def _published(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / f"{hashlib.sha256(data).hexdigest()}.json"
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(("content", "problem"), [
    (b"[1]", "must be an object with the keys additional_config, environ, facts, soc"),
    (b'{"soc": "cpu"}', "must be an object with the keys"),
    (b'{"soc": 3, "additional_config": {}, "facts": {}, "environ": {}}',
     "soc must be a JSON string"),
    (b'{"soc": "cpu", "additional_config": [], "facts": {}, "environ": {}}',
     "additional_config must be a JSON object"),
    (b'{"soc": "cpu", "additional_config": {}, "facts": {}, "environ": {"A": 1}}',
     "every environ value must be a string"),
    (b"{not json", "is not JSON"),
])
def test_read_inputs_rejects_bad_content_naming_the_problem(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    from vllm_ascend.base.worker_inputs import WorkerInputsError, read_inputs

    with pytest.raises(WorkerInputsError, match=problem):
        read_inputs(_published(tmp_path, content))


def test_read_inputs_checks_name_hash_and_size_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_ascend.base import worker_inputs
    from vllm_ascend.base.trusted_paths import UntrustedPathError

    data = worker_inputs.encode_inputs(
        {"soc": "cpu", "additional_config": {}, "facts": {}, "environ": {}})
    path = _published(tmp_path, data)
    with pytest.raises(worker_inputs.WorkerInputsError, match="absolute path named <sha256>"):
        worker_inputs.read_inputs(str(tmp_path / "inputs.json"))
    with pytest.raises(worker_inputs.WorkerInputsError, match="absolute path"):
        worker_inputs.read_inputs(os.path.relpath(path))
    monkeypatch.setattr(worker_inputs, "MAX_INPUTS_BYTES", len(data))
    assert worker_inputs.read_inputs(path)["soc"] == "cpu"  # exactly at the bound
    monkeypatch.setattr(worker_inputs, "MAX_INPUTS_BYTES", len(data) - 1)
    with pytest.raises(UntrustedPathError, match=f"{len(data)} bytes, over the "):
        worker_inputs.read_inputs(path)
    with pytest.raises(worker_inputs.WorkerInputsError, match="over the"):
        worker_inputs.write_inputs(data, tmp_path)
    monkeypatch.undo()
    missing = tmp_path / f"{'0' * 64}.json"
    with pytest.raises(worker_inputs.WorkerInputsError, match="is missing: the worker inputs "):
        worker_inputs.read_inputs(missing)
    path.write_bytes(data.replace(b"cpu", b"npu"))
    with pytest.raises(worker_inputs.WorkerInputsError, match="does not match its name"):
        worker_inputs.read_inputs(path)


def test_a_failed_publication_removes_the_earlier_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from vllm_ascend.base import worker_inputs
    from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV, publish_worker_inputs

    facts = types.SimpleNamespace(to_dict=lambda: {"soc": "cpu"})
    env: dict[str, str] = {}
    assert publish_worker_inputs("cpu", {}, facts, {}, environ=env)
    assert not publish_worker_inputs("cpu", {"x": object()}, facts, {}, environ=env)
    assert WORKER_INPUTS_ENV not in env
    assert publish_worker_inputs("cpu", {}, facts, {}, environ=env)

    def full(data: bytes, directory: Path | None = None) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(worker_inputs, "write_inputs", full)
    large = {"y": "v" * worker_inputs.INLINE_LIMIT}  # too large to stay inline: a file
    assert not publish_worker_inputs("cpu", large, facts, {}, environ=env)
    assert WORKER_INPUTS_ENV not in env


def _inputs_of_size(size: int) -> tuple[dict[str, object], bytes]:
    from vllm_ascend.base.worker_inputs import encode_inputs

    inputs: dict[str, object] = {"soc": "cpu", "additional_config": {"k": ""}, "facts": {},
                                 "environ": {}}
    pad = size - len(encode_inputs(inputs))
    inputs["additional_config"] = {"k": "x" * pad}
    data = encode_inputs(inputs)
    assert len(data) == size
    return inputs, data


@pytest.mark.parametrize("extra", [0, 1])
def test_small_inputs_stay_inline_so_workers_on_other_hosts_read_them(extra: int) -> None:
    from vllm_ascend.base.worker_inputs import INLINE_LIMIT, env_value, inputs_from_env

    inputs, data = _inputs_of_size(INLINE_LIMIT + extra)
    value = env_value(data)
    if extra == 0:  # at the limit: the JSON itself, no file needed on the worker's host
        assert value == data.decode()
    else:  # one byte over: the path of the private file
        assert Path(value).is_absolute() and Path(value).read_bytes() == data
    assert inputs_from_env(value) == inputs


@pytest.mark.parametrize(("value", "why"), [
    ('{"soc": "cpu"', "the inline worker inputs are not JSON"),
    ('{"soc": "cpu"}', "the inline worker inputs must be an object with the keys"),
    ("{" + " " * (32 << 10) + "}", "over the 32768-character limit"),
])
def test_inline_inputs_are_checked_like_files(value: str, why: str) -> None:
    from vllm_ascend.base.worker_inputs import WorkerInputsError, inputs_from_env

    with pytest.raises(WorkerInputsError, match=why):
        inputs_from_env(value)
