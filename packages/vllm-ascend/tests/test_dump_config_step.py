"""The msprobe dump-config step: building a real VllmConfig with ``dump_config`` writes the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DUMP = {"task": "statistics", "level": "L1", "dump_path": "/tmp/msprobe", "step": [0, 1],
        "note": "données"}
TARGET = Path(".vllm_ascend") / "msprobe" / "msprobe_dump_config.json"


def test_config_build_writes_the_dump_file(make_vllm_config: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_vllm_config(additional_config={"dump_config": DUMP})  # runs the platform pipeline
    written = tmp_path / TARGET
    assert json.loads(written.read_text(encoding="utf-8")) == DUMP
    assert "données" in written.read_text(encoding="utf-8")  # non-ASCII kept
    assert list(written.parent.iterdir()) == [written]  # no temporary file left behind


def test_no_dump_config_writes_nothing_and_a_path_is_used_as_given(
    make_vllm_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    monkeypatch.chdir(tmp_path)
    make_vllm_config()
    own = tmp_path / "mine.json"
    make_vllm_config(additional_config={"dump_config_path": str(own)})
    assert not (tmp_path / ".vllm_ascend").exists()
    import ascend_config

    resolved = ascend_config.resolve({"dump_config_path": str(own)},
                                     facts=ascend_config.DeploymentFacts())
    assert write_dump_config(resolved, str(tmp_path)) == own


def test_unwritable_target_is_one_clear_error(tmp_path: Path) -> None:
    import ascend_config
    from vllm_ascend.config_pipeline.steps import write_dump_config

    (tmp_path / ".vllm_ascend").write_text("a file where the directory should be")
    resolved = ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())
    with pytest.raises(RuntimeError, match=r"dump_config: cannot write .*msprobe_dump_config"):
        write_dump_config(resolved, str(tmp_path))
