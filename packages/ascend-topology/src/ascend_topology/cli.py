"""The ``ascend-topology`` command: show, plan, bind, capture, examples."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace

from ascend_topology.apply import apply
from ascend_topology.errors import PlanError, RecordedHostError, TopologyError
from ascend_topology.facts import SOCS, HostFacts
from ascend_topology.live import capture_live_host, read_live_host
from ascend_topology.plan_types import Plan, PlanOptions
from ascend_topology.planner import plan
from ascend_topology.recorded import example_hosts, load_recorded_host

PROG = "ascend-topology"
EXIT_FAILED = 1
"""This host could not be read or bound, or the plan cannot be applied as configured."""
EXIT_BAD_INPUT = 2
"""Bad input: arguments, option values, a recorded host (argparse uses 2 as well)."""
EXIT_NO_SPACE = 74
"""The disk behind stdout is full (sysexits.h's EX_IOERR); the message names the file."""


class _UsageError(Exception):
    """A user-facing error about how the CLI was called (one line)."""


class _OutputError(Exception):
    """stdout refused the output (closed, a full disk, ``/dev/full``)."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


def _print(text: str) -> None:
    """Write a line to stdout, flushed, so that a stdout that cannot take it is named as such.
    What the stream's encoding cannot carry goes out as the bytes it came from (a path's
    undecodable byte) or as a backslash escape, never as a UnicodeEncodeError."""
    stream = sys.stdout
    if stream is None:
        raise _OutputError("cannot write to stdout: stdout is closed")
    data = f"{text}\n"
    try:
        buffer = getattr(stream, "buffer", None)
        if buffer is None:  # a text-only stream (a test's capture)
            stream.write(data)
        else:
            stream.flush()
            buffer.write(_encode(data, stream.encoding or "utf-8"))
        stream.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise _OutputError(f"no space left on device writing {_stdout_path()}",
                               EXIT_NO_SPACE) from None
        raise _OutputError(f"cannot write to stdout: {exc.strerror or exc}") from None


def _encode(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding, "surrogateescape")
    except UnicodeEncodeError:
        return text.encode(encoding, "backslashreplace")


def _stdout_path() -> str:
    try:
        return os.fsdecode(os.readlink("/proc/self/fd/1"))
    except OSError:
        return "stdout"


def _guard_standard_streams() -> None:
    """``/dev/null`` on a closed descriptor 0, 1 or 2, so no file opened later takes its number
    (``sys.stdout`` stays None: the output is still refused as closed)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            spare = os.open(os.devnull, os.O_RDWR)
            if spare != fd:
                os.dup2(spare, fd)
                os.close(spare)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def host_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", metavar="DIR",
                       help="a recorded-host folder or an example name (see `examples`); "
                            "default: this host")
        p.add_argument("--soc", choices=SOCS, help="override SoC detection")

    def plan_args(p: argparse.ArgumentParser) -> None:
        host_args(p)
        p.add_argument("--min-cpus-per-npu", type=int, metavar="N",
                       help="smallest pool per NPU (default: 3 on Ascend 950, else 5)")
        p.add_argument("--bind-irq", action="store_true",
                       help="reserve two CPUs per NPU for its IRQs and bind them")
        p.add_argument("--no-migrate-memory", action="store_true",
                       help="do not run migratepages")

    show = sub.add_parser("show", help="print the host facts")
    host_args(show)
    show.add_argument("--json", action="store_true", help="print JSON")
    plan_cmd = sub.add_parser("plan", help="print the CPU plan per NPU")
    plan_args(plan_cmd)
    plan_cmd.add_argument("--rank", type=int, help="mark this local rank's row")
    plan_cmd.add_argument("--json", action="store_true", help="print the plan as JSON")
    bind = sub.add_parser("bind", help="bind a process to its NPU's CPUs")
    plan_args(bind)
    bind.add_argument("--rank", type=int, required=True, help="the worker's local rank")
    bind.add_argument("--pid", type=int, help="process to bind (default: this one, then run "
                                              "COMMAND in it)")
    bind.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    bind.add_argument("--stop-irqbalance", action="store_true",
                      help="with --bind-irq: stop irqbalance so that it keeps the binding")
    bind.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                      help="program to run with the binding (after --)")
    capture = sub.add_parser("capture", help="record this host into a folder")
    capture.add_argument("dir", metavar="DIR", help="folder to record into (created if missing)")
    capture.add_argument("--soc", choices=SOCS, help="override SoC detection")
    capture.add_argument("--force", action="store_true",
                         help="write into DIR even when it already holds files")
    sub.add_parser("examples", help="list the bundled example hosts")
    return parser


def _facts(args: argparse.Namespace) -> HostFacts:
    if args.host:
        facts = load_recorded_host(args.host)
        if args.soc and args.soc != facts.soc:
            facts = replace(facts, soc=args.soc)
        return facts
    return read_live_host(soc=args.soc)


def _plan(args: argparse.Namespace) -> Plan:
    options = PlanOptions(min_cpus_per_npu=args.min_cpus_per_npu, bind_irq=args.bind_irq,
                          migrate_memory=not args.no_migrate_memory)
    return plan(_facts(args), options)


def _cmd_plan(args: argparse.Namespace) -> int:
    result = _plan(args)
    if args.rank is not None:
        result.for_rank(args.rank)
    _print(result.to_json() if args.json else result.explain(args.rank))
    if not result.ok:
        print(f"{PROG}: plan not applicable: {result.reason}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _cmd_bind(args: argparse.Namespace) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.host and not args.dry_run:
        raise _UsageError("--host plans a recorded host; add --dry-run to print its plan "
                          "(binding needs this host's live facts)")
    if command and args.pid is not None:
        raise _UsageError("give either --pid or a COMMAND to run, not both")
    result = _plan(args)
    pool = result.for_rank(args.rank)
    if args.dry_run:
        _print(result.explain(args.rank))
        target = args.pid if args.pid is not None else "this process"
        verdict = "would bind" if result.ok else "would NOT bind"
        _print(f"\ndry run: {verdict} {target} (rank {args.rank}) to NPU {pool.npu}; "
              "nothing was changed")
        return 0 if result.ok else EXIT_FAILED
    if not result.ok:
        print(f"{PROG}: error: cannot bind: {result.reason}", file=sys.stderr)
        return EXIT_FAILED
    report = apply(result, args.rank, pid=args.pid, stop_irqbalance=args.stop_irqbalance)
    for line in report.lines():
        _print(line)
    if not report.bound:
        return EXIT_FAILED
    if command:
        try:
            os.execvp(command[0], command)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            print(f"{PROG}: error: cannot run {command[0]!r}: {reason}", file=sys.stderr)
            return EXIT_FAILED
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "examples":
        _print("\n".join(example_hosts()))
        return 0
    if args.command == "capture":
        for path in capture_live_host(args.dir, soc=args.soc, force=args.force):
            _print(f"wrote {path}")
        return 0
    if args.command == "show":
        facts = _facts(args)
        _print(json.dumps(facts.to_dict(), indent=2) if args.json else facts.describe())
        return 0
    if args.command == "plan":
        return _cmd_plan(args)
    return _cmd_bind(args)


def _error(problems: Sequence[str], status: int) -> int:
    for problem in problems:
        flat = " ".join(problem.splitlines())  # one line per problem, whatever a value held
        print(f"{PROG}: error: {flat}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ascend-topology`` console script; returns the exit status.

    0 success; 1 (``EXIT_FAILED``) when this host cannot be read or bound or the plan is not
    applicable or stdout is closed; 2 (``EXIT_BAD_INPUT``) for bad arguments, option values or
    recorded hosts; 74 (``EXIT_NO_SPACE``) when the disk behind stdout is full.
    Errors print one ``ascend-topology: error: ...`` line per problem, never a traceback.
    """
    _guard_standard_streams()
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except _UsageError as exc:
        return _error([str(exc)], EXIT_BAD_INPUT)
    except _OutputError as exc:
        devnull = os.open(os.devnull, os.O_WRONLY)  # the exit's own flush must not fail again
        os.dup2(devnull, 1)
        os.close(devnull)
        return _error([str(exc)], exc.status)
    except (RecordedHostError, PlanError) as exc:
        return _error(exc.problems, EXIT_BAD_INPUT)
    except TopologyError as exc:
        return _error(exc.problems, EXIT_FAILED)
    except Exception as exc:  # one clear line instead of a traceback
        return _error([f"unexpected {type(exc).__name__}: {exc}"], EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
