"""The ModelSlim quantization description: which scheme each checkpoint parameter uses."""
# Keys without a dot (model_quant_type, version, ...) are metadata. Stdlib only: testable without
# vLLM.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

DESCRIPTION_FILE: Final = "quant_model_description.json"
METHOD_NAME: Final = "ascend"

W8A8: Final = "W8A8"  # static per-tensor int8 activation (scale, offset), per-channel int8 weight
W8A8_DYNAMIC: Final = "W8A8_DYNAMIC"  # per-token dynamic int8 activation, per-channel weight
FLOAT: Final = "FLOAT"  # not quantized
SCHEMES: Final = (W8A8, W8A8_DYNAMIC, FLOAT)

# Parameter names that carry a layer's scheme in the description.
_SCHEME_SUFFIX: Final = ".weight"
_PROBLEMS_SHOWN: Final = 20


class QuantDescriptionError(ValueError):
    """A quantization description that this plugin cannot run; lists every problem found."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        shown = self.problems[:_PROBLEMS_SHOWN]
        more = len(self.problems) - len(shown)
        lines = [*shown, f"... and {more} more"] if more > 0 else shown
        super().__init__("invalid ascend quantization description:\n  " + "\n  ".join(lines))


@dataclass(frozen=True)
class QuantDescription:
    """Parsed description: parameter name -> scheme, plus the metadata entries."""

    schemes: Mapping[str, str]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: object) -> QuantDescription:
        """Validate a description mapping; :class:`QuantDescriptionError` names each bad entry."""
        if not isinstance(raw, Mapping):
            raise QuantDescriptionError(
                [f"the description must be a JSON object, got {type(raw).__name__}"]
            )
        problems: list[str] = []
        schemes: dict[str, str] = {}
        metadata: dict[str, Any] = {}
        for key, value in raw.items():
            if not isinstance(key, str) or not key:
                problems.append(f"key {key!r}: keys must be non-empty strings")
            elif "." not in key:
                metadata[key] = value
            elif not isinstance(value, str) or value not in SCHEMES:
                problems.append(
                    f"{key}: scheme {value!r} is not supported; allowed: {', '.join(SCHEMES)}"
                )
            else:
                schemes[key] = value
        method = metadata.get("quant_method", METHOD_NAME)
        if method != METHOD_NAME:
            problems.append(f"quant_method: {method!r} is not {METHOD_NAME!r}")
        if problems:
            raise QuantDescriptionError(problems)
        return cls(schemes, metadata)

    def parameter_scheme(self, module: str) -> str:
        """Scheme of one checkpoint module (``<module>.weight``); unlisted modules are FLOAT."""
        return self.schemes.get(module + _SCHEME_SUFFIX, FLOAT)

    def layer_scheme(self, prefix: str, packed: Mapping[str, Sequence[str]]) -> str:
        """Scheme of the vLLM layer ``prefix``; a fused layer (``packed``: its name -> the
        checkpoint modules it fuses) needs one scheme for all its parts."""
        parent, _, name = prefix.rpartition(".")
        parts = packed.get(name)
        if not parts:
            return self.parameter_scheme(prefix)
        modules = [f"{parent}.{part}" if parent else part for part in parts]
        found = [self.parameter_scheme(m) for m in modules]
        if len(set(found)) > 1:
            listed = ", ".join(f"{m}={s}" for m, s in zip(modules, found, strict=True))
            raise QuantDescriptionError(
                [f"{prefix} fuses modules with different schemes ({listed}); "
                 "a fused layer needs one scheme for every part"]
            )
        return found[0]

    def quantized_modules(self) -> list[str]:
        """Checkpoint modules whose weight is quantized (sorted)."""
        return sorted(
            key.removesuffix(_SCHEME_SUFFIX)
            for key, scheme in self.schemes.items()
            if scheme != FLOAT and key.endswith(_SCHEME_SUFFIX)
        )
