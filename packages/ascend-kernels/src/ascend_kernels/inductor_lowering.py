"""Inductor lowerings of ``torch.ops.ascend.*`` from their decompositions (host CPU).

To inductor a ``torch.ops.ascend.*`` node is an opaque extern call: one trip through the
dispatcher into the Python reference per call, no fusion with its neighbours. With these
lowerings, inductor traces the op's decomposition (its whole-tensor reference,
:data:`ascend_kernels.ops.DECOMPOSITIONS`) at lowering time and inlines it as ordinary IR,
so the norm, rope and muls_add arithmetic is fused into the generated C++ kernels around
it. The FX graph inductor receives, and every pass before lowering, still holds the
``torch.ops.ascend.*`` nodes (fusion passes and graph dumps see them); only the generated
code changes.

Registration is explicit (:func:`register_inductor_lowerings`, e.g. by the host-CPU pass
manager), never at import, and :func:`reset_inductor_lowerings` restores inductor's table.
Inductor's lowering table is process-global, so this module keeps the one record of what it
changed there (:class:`LoweringRegistry`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ascend_kernels.ops import DECOMPOSITIONS, NAMESPACE

logger = logging.getLogger(__name__)

_MISSING = object()


def inductor_settings() -> dict[str, Any]:
    """The inductor options a compile that inlines these decompositions needs.

    ``realize_cpu_opcount_threshold``: the ops' kept casts (their stored intermediates, see
    :func:`make_lowering`) add ops to every pointwise body; past inductor's CPU default (50)
    it stores the normed q/k heads in float32 scratch buffers instead of recomputing them in
    the rope loop: an allocation and a loop per layer. Inductor's
    ``emulate_precision_casts`` stays off: it would round every low-precision op of the whole
    graph, the model's own ops included, where inductor otherwise keeps fused intermediates
    in float32 (closer to a float32 model).
    """
    return {"realize_cpu_opcount_threshold": 100}


@functools.cache
def lowering_fingerprint() -> str:
    """Hash of the decompositions and this module: part of a compile-cache key, since the
    generated code depends on them."""
    digest = hashlib.sha256()
    modules = {inspect.getmodule(fn) for fn in DECOMPOSITIONS.values()}
    for module in (*sorted(modules, key=str), inspect.getmodule(lowering_fingerprint)):
        digest.update(inspect.getsource(module).encode())  # type: ignore[arg-type]
    return digest.hexdigest()[:16]


def _overload(op: str) -> torch._ops.OpOverload:
    return getattr(getattr(torch.ops, NAMESPACE), op).default  # type: ignore[no-any-return]


def _positional(overload: torch._ops.OpOverload, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> list[Any]:
    """The op's arguments in schema order (defaults filled in)."""
    values = list(args)
    for argument in overload._schema.arguments[len(args):]:
        if argument.name in kwargs:
            values.append(kwargs[argument.name])
        elif argument.has_default_value():
            values.append(argument.default_value)
        else:
            raise TypeError(f"{overload}: missing argument {argument.name!r}")
    return values


def _is_constant(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float))


class TraceCache:
    """Decomposition graphs already traced, per fake mode (one model compile).

    Tracing a decomposition with symbolic shapes costs far more than inlining it, and a model
    calls each op with the same argument metadata in every layer (and, under vLLM's piecewise
    compilation, in every piece: the pieces share Dynamo's fake mode and shape symbols). A
    graph is reused only for the same op, constants and input dtypes, sizes and strides, under
    the same fake mode; entries go away with their fake mode.
    """

    def __init__(self) -> None:
        self._graphs: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, fake_mode: Any, key: tuple[Any, ...]) -> Any:
        return self._graphs.get(fake_mode, {}).get(key)

    def put(self, fake_mode: Any, key: tuple[Any, ...], graph: Any) -> None:
        self._graphs.setdefault(fake_mode, {})[key] = graph


def _meta_key(fake: torch.Tensor) -> tuple[str, str, str]:
    return (str(fake.dtype), str(tuple(fake.shape)), str(fake.stride()))


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _downcast(node: Any) -> bool:
    """Whether ``node`` casts a float32 value to a low-precision dtype."""
    return (isinstance(node, torch.fx.Node)
            and node.target is torch.ops.prims.convert_element_type.default
            and node.args[1] in _LOW_PRECISION
            and isinstance(node.args[0], torch.fx.Node)
            and node.args[0].meta["val"].dtype == torch.float32)


def _cast_arguments(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.dtype]:
    """(source node, target dtype) of a ``convert_element_type`` node."""
    source, dtype = node.args[0], node.args[1]
    assert isinstance(source, torch.fx.Node) and isinstance(dtype, torch.dtype)
    return source, dtype


def _stored_pairs(graph: torch.fx.GraphModule) -> dict[torch.fx.Node, torch.fx.Node]:
    """The decomposition's stored intermediates: each float32 node that upcasts a downcast
    (``t32.to(bf16).to(float32)``, ``ops.norm.stored``), mapped to the downcast."""
    return {node: node.args[0] for node in graph.graph.nodes
            if node.target is torch.ops.prims.convert_element_type.default
            and node.args[1] == torch.float32 and _downcast(node.args[0])}


def _round_trip(x: Any, dtype: torch.dtype) -> Any:
    """Inductor IR of float32 ``x`` rounded to ``dtype`` and read back as float32.

    A pair of plain ``to_dtype`` casts inside one C++ kernel is folded into the unrounded
    value: the kernel's cast cache maps the upcast of a downcast back to its source, also when
    the same downcast is stored elsewhere in the kernel. So the
    casts skip inductor's compute-type shortcuts (``use_compute_types=False``) and the downcast
    reads ``x * 1`` (the same value, exactly), an expression no store of ``x`` shares.
    """
    from torch._inductor.lowering import make_pointwise
    from torch._inductor.virtualized import ops

    def fn(value: Any) -> Any:
        same = ops.mul(value, ops.constant(1.0, torch.float32))
        low = ops.to_dtype(same, dtype, src_dtype=torch.float32, use_compute_types=False)
        return ops.to_dtype(low, torch.float32, src_dtype=dtype, use_compute_types=False)

    return make_pointwise(fn, override_return_dtype=torch.float32)(x)


def _inline(graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    """``graph``'s nodes as inductor IR (as inductor's ``process_subgraph_nodes`` does),
    with its stored intermediates rounded for real (:func:`_round_trip`).

    The op's results are lowered without ``run_node``'s treatment of graph outputs (which
    stores each in a buffer of its dtype): the decomposition's output is not the model's, so
    the model's graph decides where a result is stored, as it does for vLLM's native ops. A
    bf16 result read by a consumer inductor fuses with the op (e.g. ``add_rms_norm``'s
    ``residual_out`` in the next layer's sum) is then its float32 value, not a bf16 store.
    """
    from torch._inductor.virtualized import V

    pairs = _stored_pairs(graph)
    results = {value for node in graph.graph.nodes if node.op == "output"
               for value in node.all_input_nodes}
    output = None
    original_module = V.graph.module
    V.graph.module = graph
    try:
        for i, node in enumerate(graph.graph.nodes):
            if node.op == "placeholder":
                V.graph.env[node] = inputs[i]
            elif node.op == "output":
                args, kwargs = V.graph.fetch_args_kwargs_from_env(node)
                output = torch.fx.Interpreter.output(V.graph, node, args, kwargs)
            else:
                saved = V.graph.current_node
                V.graph.current_node = node
                try:
                    if node in pairs:
                        source, dtype = _cast_arguments(pairs[node])
                        V.graph.env[node] = _round_trip(V.graph.env[source], dtype)
                    elif node in results and node.op == "call_function":
                        args, kwargs = V.graph.fetch_args_kwargs_from_env(node)
                        V.graph.env[node] = V.graph.call_function(node.target, args, kwargs)
                    else:
                        V.graph.env[node] = V.graph.run_node(node)
                finally:
                    V.graph.current_node = saved
    finally:
        V.graph.module = original_module
    return output


def make_lowering(
    overload: torch._ops.OpOverload, decomposition: Callable[..., Any], cache: TraceCache
) -> Callable[..., Any]:
    """An inductor lowering of ``overload`` that inlines ``decomposition``.

    Tensor arguments arrive as inductor IR nodes; the other arguments must be plain constants
    (the ascend schemas' ints, floats and bools); when they are not, or when the decomposition
    cannot be traced, the op stays an extern call.
    """
    from torch._inductor import ir
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import fallback_handler
    from torch._inductor.virtualized import V
    from torch.fx.experimental.proxy_tensor import make_fx

    name = f"{NAMESPACE}_{overload._schema.name.split('::')[-1]}"
    extern = fallback_handler(overload, add_to_fallback_set=False)  # type: ignore[no-untyped-call]

    def trace(values: list[Any], slots: list[int], fakes: list[torch.Tensor]) -> Any:
        def traced(*tensors: torch.Tensor) -> Any:
            full = list(values)
            for slot, tensor in zip(slots, tensors, strict=True):
                full[slot] = tensor
            return decomposition(*full)

        # Tracing may add guards that equate shape symbols the op's contract already equates
        # (e.g. the length of ``positions`` and the token count of ``q``): inductor's own
        # lowerings add such guards too.
        return make_fx(traced, decomposition_table=select_decomp_table(),
                       tracing_mode="symbolic")(*fakes)

    def lower(*args: Any, **kwargs: Any) -> Any:
        values = _positional(overload, args, kwargs)
        slots = [i for i, v in enumerate(values) if isinstance(v, ir.IRNode)]
        if not all(_is_constant(v) for i, v in enumerate(values) if i not in slots):
            return extern(*args, **kwargs)
        tensors = [values[i] for i in slots]
        with V.fake_mode:
            fakes = [ir.ir_node_to_tensor(t) for t in tensors]
        key = (tuple(v for i, v in enumerate(values) if i not in slots),
               tuple(_meta_key(f) for f in fakes))
        graph = cache.get(V.fake_mode, key)
        if graph is None:
            try:
                with V.fake_mode:
                    graph = trace(values, slots, fakes)
            except Exception as exc:  # e.g. an argument the tracer cannot handle
                logger.info("%s stays an extern call: %s", overload, exc)
                return extern(*args, **kwargs)
            cache.put(V.fake_mode, key, graph)
        try:
            # The op's stored intermediates stay real roundings (``_round_trip``); its inputs'
            # upcasts and its one cast at the end are ordinary casts, as the model's own: a
            # consumer inductor fuses with the op reads the float32 value, as it does after
            # vLLM's native ops (inductor's ``emulate_precision_casts`` stays off here too).
            return _inline(graph, tensors)
        finally:
            # The same traced graph may be inlined again in this lowering.
            for node in graph.graph.nodes:
                V.graph.env.pop(node, None)

    lower.__name__ = lower.__qualname__ = f"lower_{name}"
    return lower


class LoweringRegistry:
    """What this package put into inductor's lowering table, and what it replaced."""

    def __init__(self) -> None:
        self._previous: dict[torch._ops.OpOverload, Any] = {}
        self.traces = TraceCache()

    @property
    def registered(self) -> list[str]:
        """Names of the ops lowered through their decompositions now."""
        return sorted(str(op) for op in self._previous)

    def register(self, ops: dict[str, Callable[..., Any]] | None = None) -> list[str]:
        """Lower each op of ``ops`` (default: every decomposition) through its decomposition;
        returns the op names registered by this call. Idempotent."""
        from torch._inductor.lowering import lowerings

        done = []
        for op, decomposition in (DECOMPOSITIONS if ops is None else ops).items():
            overload = _overload(op)
            if overload in self._previous:
                continue
            self._previous[overload] = lowerings.get(overload, _MISSING)
            lowerings[overload] = make_lowering(overload, decomposition, self.traces)
            done.append(op)
        if done:
            logger.info("inductor lowers through decompositions: %s", ", ".join(done))
        return done

    def reset(self) -> None:
        """Put inductor's previous entries back (none: the op is an extern call again)."""
        from torch._inductor.lowering import lowerings

        for overload, previous in self._previous.items():
            if previous is _MISSING:
                lowerings.pop(overload, None)
            else:
                lowerings[overload] = previous
        self._previous.clear()


_REGISTRY = LoweringRegistry()


def register_inductor_lowerings() -> list[str]:
    """Lower every decomposed ``torch.ops.ascend.*`` op inline in inductor (this process)."""
    return _REGISTRY.register()


def registered_inductor_lowerings() -> list[str]:
    """The ops currently lowered through their decompositions."""
    return _REGISTRY.registered


def reset_inductor_lowerings() -> None:
    """Undo :func:`register_inductor_lowerings` (tests, or to compare both code paths)."""
    _REGISTRY.reset()
