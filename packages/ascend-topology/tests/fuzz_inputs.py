"""Hypothesis settings and strategies shared by the topology parser fuzz tests: mutated
npu-smi/lscpu samples, token soup, and garbled ``host.json`` values."""

from __future__ import annotations

from ascend_topology import example_host_dir
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


BOUNDED = settings(max_examples=80, deadline=None, database=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


SAMPLES = {
    name: example_host_dir(ex).joinpath(name).read_text()
    for ex, name in [("a2-8npu", "npu-smi-info-m.txt"), ("a3-16die", "npu-smi-info.txt"),
                     ("950-4numa", "npu-smi-info.txt"), ("a2-8npu", "npu-smi-info-t-topo.txt"),
                     ("x86-a2", "lscpu-e.txt")]
}


TOKENS = [*"0123456789 -,|+=:\t\nABCDEFX", "NPU", "NPU ID", "Chip", "Chip Logic ID",
          "Process id", "CPU Affinity", "PCIe Bus Info", "sq_send_trigger_irq",
          "Thread(s) per core:", "  ", "\u00a0", "\u0663", "\u00b2", "99999999999"]


ALPHABET = st.lists(st.sampled_from(TOKENS), max_size=80).map("".join)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A sample npu-smi/lscpu output with random edits: deletions, insertions, shuffles."""
    text = draw(st.sampled_from(sorted(SAMPLES.values())))
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        op = draw(st.sampled_from(["drop", "dup", "swap", "insert", "cut", "junk"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, draw(ALPHABET))
        elif op == "cut":
            k = draw(st.integers(0, max(len(lines[i]), 0)))
            lines[i] = lines[i][:k]
        else:
            k = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:k] + draw(ALPHABET) + lines[i][k:]
    return "\n".join(lines)


TEXTS = st.one_of(mutated(), st.text(max_size=300), ALPHABET)


CHIP_MAPS = st.dictionaries(st.integers(0, 9), st.dictionaries(st.integers(0, 2),
                                                               st.integers(0, 20), max_size=3),
                            max_size=5)


KEYS = ["arch", "soc", "allowed_cpus", "threads_per_core", "numa", "visible_devices", "pcie"]


SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 10),
    st.sampled_from([8191, 8192, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["0-3", "0-8191", "0-8192", "3-1", "0,1", "x", "", "A2", "A5", "310P",
                     "0000:c1:00.0", "\u00b2", "1" * 40]),
    st.text(max_size=12),
)


VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.sampled_from(["0", "1", "7", "99999", "100000", "-1", "a", ""]), inner, max_size=4),
    max_leaves=12,
)
