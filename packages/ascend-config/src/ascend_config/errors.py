"""The one error type of ascend_config: every problem found, one line each (stdlib only)."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ascend_config.limits import MAX_REPORTED_PROBLEMS

MAX_LINE = 300
_IDENT = re.compile(r"[A-Za-z0-9_]+\Z")
_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxdict = 4
_REPR.maxlist = 4
_REPR.maxtuple = 4


def short_repr(value: object) -> str:
    """A bounded, single-line repr of a user value (depth, length and size limited)."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a hostile __repr__ must not hide the real problem
        text = f"<{type(value).__name__}>"
    text = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= 80 else text[:77] + "..."


def render_path(parts: Iterable[object]) -> str:
    """Dotted key path; list indices as ``[i]``; odd keys quoted so the path stays one line."""
    out = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
            continue
        text = str(part)
        if not _IDENT.match(text):
            text = short_repr(text)
        out = f"{out}.{text}" if out else text
    return out or "<additional_config>"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())  # newlines and tabs never survive into a problem line
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Problem:
    """One thing wrong: where (``path``), what was given (``value``), what is allowed."""

    path: str
    value: str
    allowed: str
    message: str

    def line(self) -> str:
        """The problem as one line of at most 300 characters."""
        # _clip folds the double space left by an empty message
        text = f"{self.path}: {self.message} (given {self.value}; allowed: {self.allowed})"
        return _clip(text, MAX_LINE)


def make_problem(path: str, value: object, allowed: str, message: str) -> Problem:
    """Build a problem with every part bounded (value rendered with :func:`short_repr`)."""
    return Problem(
        path=_clip(path, 120),
        value=short_repr(value),
        allowed=_clip(allowed, 160),
        message=_clip(message, 160),
    )


class AscendConfigError(ValueError):
    """Every problem of an Ascend configuration, reported together (one per line).

    At most :data:`~ascend_config.limits.MAX_REPORTED_PROBLEMS` problems are kept and listed;
    ``omitted`` counts the rest (shown as a last line "... and N more problems").
    """

    def __init__(self, problems: Sequence[Problem], omitted: int = 0) -> None:
        self.problems: list[Problem] = list(problems[:MAX_REPORTED_PROBLEMS])
        self.omitted: int = omitted + max(0, len(problems) - MAX_REPORTED_PROBLEMS)
        count = len(self.problems) + self.omitted
        head = f"{count} problem{'s' if count != 1 else ''} in the Ascend configuration:"
        lines = [head, *(p.line() for p in self.problems)]
        if self.omitted:
            lines.append(f"... and {self.omitted} more problem{'s' if self.omitted != 1 else ''}"
                         f" (the first {len(self.problems)} are listed)")
        super().__init__("\n".join(lines))

    def lines(self) -> list[str]:
        """One line per listed problem, in the order found."""
        return [p.line() for p in self.problems]
