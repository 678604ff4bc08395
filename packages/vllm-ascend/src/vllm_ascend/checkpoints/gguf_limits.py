"""What a GGUF file may ask the converter to build, checked before anything is built."""
# transformers fills missing llama sizes with defaults (6.7 B parameters for a near-empty file), so
# the header is read and bounded here first.

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from vllm_ascend.checkpoints.cache_entry import CheckpointError

MAX_PARAMETERS: Final = 1 << 30  # 1.07 B: SmolLM2-135M is 0.135 B
MAX_CONTEXT: Final = 1 << 20
MAX_STRING: Final = 1 << 20
MAX_DIMS: Final = 4
_ARRAY, _STRING = 9, 8
_SCALARS: Final = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                   10: "<Q", 11: "<q", 12: "<d"}
# The smallest a metadata entry (empty key, a u8) and a tensor info (empty name, 1 dim) can be.
_MIN_KV, _MIN_TENSOR = 8 + 4 + 1, 8 + 4 + 8 + 4 + 8
_BLOCK = re.compile(r"blk\.(\d+)\.")


class BadGguf(CheckpointError):
    """The GGUF file is not one the converter can build a model from; the message says why."""


@dataclass
class GgufHeader:
    """A GGUF file's metadata (arrays of strings kept as their length) and tensor infos."""

    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # dims, type


class _Reader:
    """Reads from the header with every length checked against the bytes left in the file."""

    def __init__(self, handle: BinaryIO, size: int, path: Path) -> None:
        self.handle, self.size, self.path = handle, size, path

    def left(self) -> int:
        return self.size - self.handle.tell()

    def take(self, count: int, what: str) -> bytes:
        if count > self.left():
            raise BadGguf(f"{self.path} is truncated: {what} needs {count} bytes, "
                          f"{self.left()} are left")
        return self.handle.read(count)

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        length = self.scalar("<Q", what)
        if length > MAX_STRING:
            raise BadGguf(f"{self.path}: {what} claims {length} bytes (at most {MAX_STRING})")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadGguf(f"{self.path}: {what} is not UTF-8") from None

    def value(self, kind: int, what: str, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], what)
        if kind == _STRING:
            return self.string(what)
        if kind != _ARRAY or depth > 0:
            raise BadGguf(f"{self.path}: {what} has value type {kind}, which is not a GGUF "
                          "type (0-12; arrays of arrays are not read)")
        item = self.scalar("<I", what)
        count = self.scalar("<Q", what)
        smallest = 8 if item == _STRING else struct.calcsize(_SCALARS.get(item, "<B"))
        if count * smallest > self.left():
            raise BadGguf(f"{self.path} is truncated: {what} claims {count} items, "
                          f"{self.left()} bytes are left")
        if item == _STRING:
            for index in range(count):
                self.string(f"{what}[{index}]")
            return [None] * count  # the converter needs only how many
        if item not in _SCALARS:
            raise BadGguf(f"{self.path}: {what} holds items of type {item}, which is not a "
                          "GGUF scalar or string type")
        fmt = _SCALARS[item]
        data = self.take(count * struct.calcsize(fmt), what)
        return list(struct.unpack(f"<{count}{fmt[1:]}", data))


def read_gguf_header(path: Path) -> GgufHeader:
    """The metadata and tensor infos of the GGUF file at ``path``; :class:`BadGguf` if not whole."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not (info.st_mode & 0o170000) == 0o100000:
                raise BadGguf(f"{path} is not a regular file")
            return _read(_Reader(handle, info.st_size, Path(path)))
    except OSError as exc:
        raise BadGguf(f"cannot read {path}: {exc.strerror or exc}") from None


def _read(reader: _Reader) -> GgufHeader:
    path = reader.path
    if reader.size < 24 or reader.take(4, "the magic") != b"GGUF":
        raise BadGguf(f"{path} is not a GGUF file (no GGUF header)")
    version = reader.scalar("<I", "the version")
    if version not in (2, 3):
        raise BadGguf(f"{path} is GGUF version {version}; versions 2 and 3 are read")
    tensor_count = reader.scalar("<Q", "the tensor count")
    kv_count = reader.scalar("<Q", "the metadata count")
    if kv_count * _MIN_KV + tensor_count * _MIN_TENSOR > reader.left():
        raise BadGguf(f"{path} claims {kv_count} metadata entries and {tensor_count} tensors, "
                      f"more than its {reader.size} bytes can hold")
    header = GgufHeader(Path(path))
    for index in range(kv_count):
        key = reader.string(f"metadata key {index}")
        kind = reader.scalar("<I", f"the type of {key!r}")
        header.metadata[key] = reader.value(kind, repr(key))
    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    for index in range(tensor_count):
        name = reader.string(f"tensor name {index}")
        n_dims = reader.scalar("<I", f"the dimensions of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise BadGguf(f"{path}: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
        dims = tuple(reader.scalar("<Q", f"the shape of {name!r}") for _ in range(n_dims))
        kind = reader.scalar("<I", f"the type of {name!r}")
        offset = reader.scalar("<Q", f"the offset of {name!r}")
        if name in header.tensors:
            raise BadGguf(f"{path}: tensor {name!r} appears twice")
        header.tensors[name] = (dims, kind)
        infos.append((name, dims, kind, offset))
    alignment = header.metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or not 1 <= alignment <= 1 << 16:
        raise BadGguf(f"{path}: general.alignment={alignment!r} (1 to 65536)")
    data_start = -(-reader.handle.tell() // alignment) * alignment
    for name, dims, kind, offset in infos:
        end = data_start + offset + _tensor_bytes(path, name, dims, kind)
        if end > reader.size:
            raise BadGguf(f"{path} is truncated: the data of tensor {name!r} ends at byte {end}, "
                          f"the file has {reader.size}")
    return header


def _tensor_bytes(path: Path, name: str, dims: tuple[int, ...], kind: int) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        raise BadGguf(f"{path}: tensor {name!r} has type {kind}, not a GGML type") from None
    if any(d < 1 for d in dims) or dims[0] % block:
        raise BadGguf(f"{path}: tensor {name!r} has shape {list(dims)}, not whole blocks of "
                      f"{block} elements of its type")
    elements = 1
    for d in dims:
        elements *= d
    return elements // block * size


_REQUIRED: Final = ("block_count", "embedding_length", "feed_forward_length",
                    "attention.head_count", "context_length")
_BLOCK_SHAPES: Final = {  # GGUF dims (innermost first) of each block tensor
    "attn_norm.weight": ("E",), "ffn_norm.weight": ("E",),
    "attn_q.weight": ("E", "E"), "attn_k.weight": ("E", "KV"), "attn_v.weight": ("E", "KV"),
    "attn_output.weight": ("E", "E"), "ffn_gate.weight": ("E", "FF"),
    "ffn_up.weight": ("E", "FF"), "ffn_down.weight": ("FF", "E"),
}


def check_llama_gguf(header: GgufHeader) -> int:
    """The parameter count of a consistent llama ``header``; :class:`BadGguf` otherwise."""
    path, meta = header.path, header.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise BadGguf(f"{path}: general.architecture is {arch!r}; the converter builds 'llama'")

    def size(key: str, low: int, high: int) -> int:
        full = f"llama.{key}"
        if full not in meta:
            raise BadGguf(f"{path} lacks the required metadata key {full}")
        value = meta[full]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadGguf(f"{path}: {full}={value!r} is not an integer in [{low}, {high}]")
        return value

    sizes = {key: size(key, 1, MAX_CONTEXT if key == "context_length" else 1 << 20)
             for key in _REQUIRED}
    heads = sizes["attention.head_count"]
    kv_heads = size("attention.head_count_kv", 1, heads) if (
        "llama.attention.head_count_kv" in meta) else heads
    if sizes["block_count"] * len(_BLOCK_SHAPES) > len(header.tensors):
        raise BadGguf(f"{path}: llama.block_count={sizes['block_count']} needs "
                      f"{sizes['block_count'] * len(_BLOCK_SHAPES)} block tensors, the file has "
                      f"{len(header.tensors)} tensors")
    embed = sizes["embedding_length"]
    if embed % heads or heads % kv_heads:
        raise BadGguf(f"{path}: llama.embedding_length={embed} is not a multiple of "
                      f"llama.attention.head_count={heads}, or that of head_count_kv={kv_heads}")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise BadGguf(f"{path} lacks the required metadata key tokenizer.ggml.tokens")
    dims = {"E": embed, "FF": sizes["feed_forward_length"], "KV": embed // heads * kv_heads,
            "V": len(tokens)}
    expected: dict[str, tuple[str, ...]] = {"token_embd.weight": ("E", "V"),
                                            "output_norm.weight": ("E",)}
    for block in range(sizes["block_count"]):
        expected.update({f"blk.{block}.{name}": shape for name, shape in _BLOCK_SHAPES.items()})
    optional: dict[str, tuple[str, ...]] = {"output.weight": ("E", "V")}
    for name in header.tensors:
        if name not in expected and name not in optional:
            found = _BLOCK.match(name)
            detail = (f"block {found.group(1)} but llama.block_count={sizes['block_count']}"
                      if found else "not a llama tensor")
            raise BadGguf(f"{path}: tensor {name!r} is {detail}")
    parameters = 0
    for name, symbols in _iter_expected(expected, optional, header):
        shape = header.tensors[name][0]
        want = tuple(dims[s] for s in symbols)
        if shape != want:
            names = ", ".join(f"{s}={dims[s]}" for s in symbols)
            raise BadGguf(f"{path}: tensor {name!r} has shape {list(shape)}, the metadata says "
                          f"{list(want)} ({names})")
        count = 1
        for d in shape:
            count *= d
        parameters += count
    if parameters > MAX_PARAMETERS:
        raise BadGguf(f"{path} describes a model of {parameters} parameters; the converter "
                      f"builds at most {MAX_PARAMETERS}")
    return parameters


def _iter_expected(expected: dict[str, tuple[str, ...]], optional: dict[str, tuple[str, ...]],
                   header: GgufHeader) -> Iterator[tuple[str, tuple[str, ...]]]:
    for name, symbols in expected.items():
        if name not in header.tensors:
            raise BadGguf(f"{header.path} lacks the tensor {name!r} its metadata implies")
        yield name, symbols
    for name, symbols in optional.items():
        if name in header.tensors:
            yield name, symbols
