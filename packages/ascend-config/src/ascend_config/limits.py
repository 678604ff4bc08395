"""Every size and range limit of ascend_config, named in one place (stdlib only).

Each bad input gets one clear error in bounded time and memory: files are size-checked before
they are parsed, nesting is bounded before anything recurses, and the work done on a config is
bounded by the number of keys and values it holds. ``docs/configuration.md`` renders
:data:`DOCUMENTED` as its "Limits" table.
"""

from __future__ import annotations

# Reads.
MAX_CONFIG_BYTES = 1 << 20
"""additional_config as a file, on stdin or as inline JSON text (bytes of UTF-8)."""
MAX_FACTS_BYTES = 32 << 20
"""A ``--facts`` JSON file (a big MoE model's quant_description alone takes several MB)."""
MAX_YAML_ALIASES = 100
"""Alias uses (``*name``, ``<<: *name``) in one YAML document."""

# Shape of the values.
MAX_DEPTH = 32
"""Levels of objects and lists, counted from the outermost object."""
MAX_CONFIG_VALUES = 100_000
"""Object keys and list items of additional_config, at any depth (a value reached twice, e.g.
through a YAML alias, counts twice)."""
MAX_CONFIG_CHARS = 4 << 20
"""Characters of all strings of additional_config, keys included (counted per use)."""
MAX_FACTS_VALUES = 1_000_000
"""Object keys and list items of one deployment fact (quant_description, ...)."""
MAX_PATH_CHARS = 4096
"""A path-valued key (ascend_log_path, dump_config_path, eplb map paths)."""
MAX_FACT_TEXT_CHARS = 4096
"""A string-valued deployment fact (model_type, dtype, architecture names, ...)."""

# Reporting.
MAX_REPORTED_PROBLEMS = 50
"""Problems listed in one error; the rest are counted ("... and 12 more")."""

# Ranges of the numeric deployment facts (inclusive).
PARALLEL_SIZE_RANGE = (1, 65_536)
"""tensor/data/pipeline/context parallel sizes and nnodes_within_dp."""
MODEL_SIZE_RANGE = (0, 1 << 24)
"""experts, heads, head_dim, hidden and intermediate sizes (index_topk: 1 upwards)."""
TOKEN_COUNT_RANGE = (0, (1 << 31) - 1)
"""max_num_seqs, max_num_batched_tokens, block_size, num_speculative_tokens."""
SCALING_FACTOR_RANGE = (0.0, 1e6)
"""routed_scaling_factor (finite)."""

DOCUMENTED: tuple[tuple[str, str, str], ...] = (
    ("MAX_CONFIG_BYTES", f"{MAX_CONFIG_BYTES:,} bytes",
     "additional_config file, stdin or inline JSON text of `ascend-config check`"),
    ("MAX_FACTS_BYTES", f"{MAX_FACTS_BYTES:,} bytes", "`--facts` JSON file"),
    ("MAX_YAML_ALIASES", f"{MAX_YAML_ALIASES}", "alias uses in one YAML document"),
    ("MAX_DEPTH", f"{MAX_DEPTH} levels",
     "nesting of objects and lists (config, free-form objects, facts, JSON text)"),
    ("MAX_CONFIG_VALUES", f"{MAX_CONFIG_VALUES:,}",
     "object keys and list items of additional_config at any depth (a shared value counts "
     "per use)"),
    ("MAX_CONFIG_CHARS", f"{MAX_CONFIG_CHARS:,} characters",
     "all strings of additional_config together, keys included"),
    ("MAX_FACTS_VALUES", f"{MAX_FACTS_VALUES:,}", "object keys and list items of one fact"),
    ("MAX_PATH_CHARS", f"{MAX_PATH_CHARS:,} characters",
     "path keys (no NUL byte, no unpaired surrogate)"),
    ("MAX_FACT_TEXT_CHARS", f"{MAX_FACT_TEXT_CHARS:,} characters", "string-valued facts"),
    ("MAX_REPORTED_PROBLEMS", f"{MAX_REPORTED_PROBLEMS}",
     "problems listed in one error (the rest are counted)"),
    ("PARALLEL_SIZE_RANGE", f"{PARALLEL_SIZE_RANGE[0]}..{PARALLEL_SIZE_RANGE[1]:,}",
     "parallel-size facts and nnodes_within_dp"),
    ("MODEL_SIZE_RANGE", f"{MODEL_SIZE_RANGE[0]}..{MODEL_SIZE_RANGE[1]:,}",
     "model-dimension facts (index_topk from 1)"),
    ("TOKEN_COUNT_RANGE", f"{TOKEN_COUNT_RANGE[0]}..{TOKEN_COUNT_RANGE[1]:,}",
     "max_num_seqs, max_num_batched_tokens, block_size, num_speculative_tokens"),
    ("SCALING_FACTOR_RANGE", f"{SCALING_FACTOR_RANGE[0]:g}..{SCALING_FACTOR_RANGE[1]:g}",
     "routed_scaling_factor (finite)"),
)
