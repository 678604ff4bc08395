"""docs/configuration.md is generated from the schema; a stale file fails this test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ascend_config.introspect import all_paths
from ascend_config.reference_doc import render_markdown

# The workspace root, found by its lock file: the mutation runner (tools/mutation.py) runs
# these tests from a copy one directory deeper.
REPO = next(p for p in Path(__file__).resolve().parents if (p / "uv.lock").is_file())
TOOL = REPO / "tools" / "gen_config_docs.py"


def test_committed_reference_is_current() -> None:
    result = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True,
                            text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_check_detects_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(render_markdown().replace("131072", "131071"))
    result = subprocess.run([sys.executable, str(TOOL), "--check", "--output", str(stale)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "stale" in result.stderr
    subprocess.run([sys.executable, str(TOOL), "--output", str(stale)], check=True,
                   capture_output=True, timeout=60)
    assert stale.read_text() == render_markdown()


def test_every_key_and_env_var_is_documented() -> None:
    text = render_markdown()
    for path in all_paths():
        assert f"`{path.rsplit('.', 1)[-1]}`" in text, path
    assert "`VLLM_ASCEND_DEVICE`" in text and "`min_cpus_per_npu`" in text
