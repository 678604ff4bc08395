"""Generate docs/configuration.md from ascend_config's schema.

Usage: ``python tools/gen_config_docs.py [--check] [--output PATH]``. ``--check`` exits 1 when
the committed file differs from what the schema produces (CI and the staleness test use it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ascend_config.reference_doc import render_markdown

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale; run: python tools/gen_config_docs.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
