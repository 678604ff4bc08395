"""Shared fixtures: a HostFacts builder, a CLI runner and stand-in npu-smi/lspci commands."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from ascend_topology import HostFacts, example_host_dir
from ascend_topology.cli import main

FactsBuilder = Callable[..., HostFacts]
InstallFake = Callable[..., Path]

FAKE_NPU_SMI = """#!{python}
import os, sys
from pathlib import Path
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(" ".join(args) + " LC_ALL=" + os.environ.get("LC_ALL", "") + "\\n")
files = {{"info -m": "npu-smi-info-m.txt", "info": "npu-smi-info.txt",
         "info -t topo": "npu-smi-info-t-topo.txt"}}
key = " ".join(args)
if key in files:
    sys.stdout.write((Path({folder!r}) / files[key]).read_text())
elif args[:3] == ["info", "-t", "board"]:
    print("Board ID : 0x02")
    print("PCIe Bus Info                  : 0000:C1:00." + args[-1])
else:
    sys.exit(2)
"""


@pytest.fixture
def install_fake_npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> InstallFake:
    """``install(example, lspci=None)``: put an ``npu-smi`` replaying a bundled example host
    first on PATH (and an ``lspci`` printing ``lspci`` when given, logging each call to
    ``lspci.log`` next to it); returns npu-smi's log."""

    def install(example: str, lspci: str | None = None) -> Path:
        bin_dir = tmp_path / "fake-bin"
        bin_dir.mkdir(exist_ok=True)
        log = tmp_path / "npu-smi.log"
        script = bin_dir / "npu-smi"
        script.write_text(FAKE_NPU_SMI.format(python=sys.executable, log=str(log),
                                              folder=str(example_host_dir(example))))
        script.chmod(0o755)
        if lspci is not None:
            (bin_dir / "lspci.out").write_text(lspci)
            fake = bin_dir / "lspci"
            fake.write_text(f"#!{sys.executable}\nimport sys\n"
                            f"open({str(bin_dir / 'lspci.log')!r}, 'a').write('lspci\\n')\n"
                            f"sys.stdout.write(open({str(bin_dir / 'lspci.out')!r}).read())\n")
            fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        return log

    return install


def _build(
    *,
    soc: str = "A2",
    numa: Mapping[int, Sequence[int]],
    allowed: Sequence[int] | None = None,
    affinity: Mapping[int, Sequence[int]] | None = None,
    npus: int | None = None,
    running: Sequence[int] | None = None,
    visible: Sequence[int] | None = None,
    threads_per_core: int = 1,
) -> HostFacts:
    affinity = dict(affinity or {})
    count = npus if npus is not None else len(affinity)
    all_cpus = sorted(c for cpus in numa.values() for c in cpus)
    return HostFacts(
        soc=soc,
        numa={n: tuple(c) for n, c in numa.items()},
        allowed_cpus=tuple(all_cpus if allowed is None else sorted(allowed)),
        chip_map={i: {0: i} for i in range(count)},
        running_npus=tuple(range(count) if running is None else running),
        affinity={n: tuple(c) for n, c in affinity.items()},
        threads_per_core=threads_per_core,
        visible_devices=None if visible is None else tuple(visible),
        source="test",
    )


@pytest.fixture
def make_facts() -> FactsBuilder:
    """Build HostFacts from plain lists: ``make_facts(numa={0: range(8)}, npus=2)``."""
    return _build


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``ascend-topology`` in-process: returns (exit status, stdout, stderr)."""

    def run(*argv: Any) -> tuple[int, str, str]:
        status = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture
def no_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """PATH holds only an empty folder (add stand-in commands to it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir
