"""`python -m vllm_ascend demo|serve ...`: the `vllm-ascend` command line."""

import sys

from vllm_ascend.entrypoints.cli import main

if __name__ == "__main__":
    sys.exit(main())
