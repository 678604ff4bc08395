"""Hypothesis settings and strategies shared by the ascend-config fuzz tests: nasty text,
JSON-like values keyed by real option names, and whole config objects."""

from __future__ import annotations

import os
from typing import Any

from ascend_config.schema.introspect import all_paths
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# The mutation runner (mutmut sets MUTANT_UNDER_TEST) runs the suite once per mutant; a tenth of
# the examples still reaches every error path there, the full count would take hours.
SCALE = 10 if "MUTANT_UNDER_TEST" in os.environ else 1


FUZZ = settings(max_examples=150 // SCALE, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


KEYS = sorted({p.split(".")[-1] for p in all_paths()})


NASTY_TEXT = ["\udcff", "\ud800x", "a\x00b", "\u2028", "\ufeff", "", " ", "~/x", "/tmp/a.json",
              "x" * 5000, "all", "true", "1", "dspark"]


TEXT = st.one_of(st.text(max_size=20), st.sampled_from(NASTY_TEXT))


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2, 3, 5, -1, 1024, 1025, 10**32]),
    st.floats(allow_nan=True, allow_infinity=True), TEXT,
)


JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(KEYS), TEXT), inner,
                                            max_size=4)),
    max_leaves=25,
)


SECTIONS = sorted(p for p in all_paths() if "." not in p)


CONFIG = st.dictionaries(st.one_of(st.sampled_from(SECTIONS), TEXT),
                         st.one_of(JSON, st.dictionaries(st.sampled_from(KEYS), SCALARS,
                                                         max_size=5)), max_size=6)
