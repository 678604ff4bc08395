"""The e2e engines' CPU time and peak RSS cover the engine's whole process tree."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.e2e_engines import cpu_seconds, peak_rss_mib, process_tree

# A child that touches 200 MiB and burns 0.5 s of CPU, then waits; its parent only waits.
CHILD = (
    "import sys, time\n"
    "block = b'x' * (200 * 2**20)\n"
    "start = time.process_time()\n"
    "while time.process_time() - start < 0.5:\n"
    "    pass\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"


def test_cpu_time_and_peak_rss_cover_the_descendants() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "ready\n"
        tree = process_tree(parent.pid)
        assert tree[0] == parent.pid and len(tree) == 2
        # The parent alone has used well under 0.5 s and holds well under 200 MiB.
        assert cpu_seconds(parent.pid) >= 0.45
        assert peak_rss_mib(parent.pid) >= 200
        assert cpu_seconds(tree[1]) <= cpu_seconds(parent.pid)
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(timeout=30)
