"""Huge pages for the host-CPU platform's large tensors: the decision, and its real effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_ascend.platform.host_huge_pages import (
    THP_ENV,
    THP_MODE_FILE,
    apply_host_huge_pages,
    huge_page_env,
    kernel_thp_mode,
)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
        ("[always] madvise never", "always"),
        ("always madvise never\n", None),  # nothing selected
        ("always [madvise] [never]\n", None),  # two selected: not the kernel's format
        ("", None),
        ("\x00\xff", None),
    ],
)
def test_kernel_mode_is_the_bracketed_word(tmp_path: Path, text: str, mode: str | None) -> None:
    path = tmp_path / "enabled"
    path.write_bytes(text.encode("latin-1"))
    assert kernel_thp_mode(path) == mode


def test_missing_mode_file_is_no_mode(tmp_path: Path) -> None:
    assert kernel_thp_mode(tmp_path / "absent") is None
    assert kernel_thp_mode(tmp_path) is None  # a directory: unreadable as text


@pytest.mark.parametrize(
    ("environ", "mode", "edit"),
    [
        ({}, "madvise", {THP_ENV: "1"}),
        ({}, "always", {THP_ENV: "1"}),
        ({}, "never", {}),
        ({}, None, {}),
        ({THP_ENV: "0"}, "madvise", {}),  # the user's opt-out stands
        ({THP_ENV: ""}, "madvise", {}),
        ({THP_ENV: "1"}, "never", {}),
    ],
)
def test_the_variable_is_set_only_when_unset_and_usable(
    environ: dict[str, str], mode: str | None, edit: dict[str, str]
) -> None:
    assert huge_page_env(environ, mode) == edit


def test_apply_edits_the_given_environment(tmp_path: Path) -> None:
    mode_file = tmp_path / "enabled"
    mode_file.write_text("always [madvise] never\n")
    environ = {"OTHER": "x"}
    assert apply_host_huge_pages(environ, mode_file) == {THP_ENV: "1"}
    assert environ == {"OTHER": "x", THP_ENV: "1"}
    assert apply_host_huge_pages(environ, mode_file) == {}  # already set: left alone
    mode_file.write_text("always madvise [never]\n")
    assert apply_host_huge_pages({}, mode_file) == {}


# register() in a fresh process, then torch allocates 64 MiB and touches it: the huge pages
# the process holds are the kernel's own count (/proc/self/smaps_rollup).
_PROBE = """
import json, os, sys
import vllm_ascend
platform = vllm_ascend.register()
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm'))
import torch
x = torch.empty(64 << 20, dtype=torch.uint8)
x.fill_(1)
huge = [int(line.split()[1]) for line in open('/proc/self/smaps_rollup')
        if line.startswith('AnonHugePages:')][0]
print(json.dumps({'platform': platform, 'env': os.environ.get('THP_MEM_ALLOC_ENABLE'),
                  'heavy': heavy, 'huge_kib': huge}))
"""


def _probe(**env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if k != THP_ENV}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=environ, capture_output=True,
                         text=True, check=True, timeout=120)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(kernel_thp_mode(THP_MODE_FILE) not in ("always", "madvise"),
                    reason="this kernel gives no transparent huge pages")
def test_activating_the_host_cpu_platform_puts_large_tensors_on_huge_pages() -> None:
    on = _probe(VLLM_ASCEND_DEVICE="cpu")
    assert on["platform"] == "vllm_ascend.platform.cpu.AscendCpuPlatform"
    assert on["env"] == "1" and on["heavy"] == []
    assert isinstance(on["huge_kib"], int) and on["huge_kib"] >= 32 << 10  # most of 64 MiB
    opted_out = _probe(VLLM_ASCEND_DEVICE="cpu", **{THP_ENV: "0"})
    assert opted_out["env"] == "0"
    if kernel_thp_mode(THP_MODE_FILE) == "madvise":  # with "always" the kernel decides alone
        assert opted_out["huge_kib"] == 0


def test_other_platforms_leave_the_variable_unset() -> None:
    # auto without an NPU activates nothing; the stock CPU platform keeps 4 KiB pages.
    assert _probe(VLLM_ASCEND_DEVICE="auto")["env"] is None
