"""The one result shape every benchmark returns, rendered as Markdown or JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Table:
    """A benchmark's result: a titled table plus free-text notes (targets, verdicts, caveats)."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        lines.append("| " + " | ".join(_escape(c) for c in self.columns) + " |")
        lines.append("|" + "---|" * len(self.columns))
        for row in self.rows:
            lines.append("| " + " | ".join(_escape(_cell(v)) for v in row) + " |")
        if self.notes:
            lines.append("")
            lines.extend(f"- {note}" for note in self.notes)
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _escape(text: str) -> str:
    """A pipe inside a cell would start a new column: Markdown's escaped pipe keeps it text."""
    return text.replace("|", "\\|")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
