"""The one NPU seam of the tests: a fake ``torch_npu`` built from the real wheel's record.

``tools/torch_npu_schemas.py`` writes ``torch_npu-<version>.json`` (here) from the torch-npu
wheel of the locked torch; this package turns it into a fake ``torch_npu`` that rejects what
the real one rejects:

- **Kernels** (``torch_npu.npu_rms_norm`` ...): every recorded schema is ``define``d in a
  scratch ``torch.library`` namespace, so the real dispatcher checks arity, keyword-only
  arguments, keyword names and argument types. Implementations enforce the documented input
  constraints (``ContractViolation``) and return outputs with the recorded dtypes, shapes and
  count (e.g. MX scales are ``uint8`` ``[..., ceil(ceil(H/32)/2), 2]``; the fused MX op
  returns 4), filled with ``fake.kernels.marker(op, i)``. Calls land in ``fake.calls``
  (``KernelCall(op, args, kwargs, outputs, before)``); ``fake.kernels.last(op)``.
- **ATB ops** (``_npu_rotary_embedding``): present; with ``atb=False`` they raise the
  ``OSError`` torch_npu raises without NNAL, and ``op_plugin.atb._atb_ops.NNAL_EX`` is set.
- **``torch_npu.npu``** (also ``torch.npu``): ``get_soc_version()`` returns ``soc_id``;
  device, stream (``synchronize()``), graph (``NPUGraph``, ``graph``, ``graph_pool_handle``)
  and memory fakes, each call bound to the recorded signature (``TypeError`` otherwise) and
  recorded in ``fake.npu.calls`` / ``fake.npu.called(name)``. ``torch_npu._C._weak_ref_tensor``.
- **npugraph_ex / torchair** under their real names (``torch_npu.dynamo.npugraph_ex``, ...)
  and ``sys.modules`` aliases; configs raise ``ValueError`` on unknown options;
  ``_NpuFxCompiler`` only in ``npu_fx_compiler``; ``_get_compiled_gm(self, gm,
  example_inputs)`` returns an object with ``get_code()`` and no ``code``. They are the
  emulated device's (``torch_npu_double.emulation.graph_ex``, one implementation for
  both); ``fake.graph_ex`` counts the graphs they compiled and ran.

API::

    from torch_npu_double.seam import install
    fake = install(monkeypatch, soc_id=256)        # sys.modules + torch.npu, undone by monkeypatch
    ...; fake.close()

or the ``fake_torch_npu`` fixture (re-export it from a conftest:
``from torch_npu_double.seam.fixtures import fake_torch_npu  # noqa: F401``), parametrizable
indirectly with a dict of ``install`` options. ``load_record()`` gives the record itself
(``soc_versions``, ``requires_torch``, ``python_apis``, ...).
"""

from __future__ import annotations

from torch_npu_double.record import load_record, locked_torch_npu_version, signature_from_text
from torch_npu_double.seam.fake_module import ATB_MISSING, FakeTorchNpu, install
from torch_npu_double.seam.kernels import ContractViolation, FakeKernels, KernelCall

__all__ = [
    "ATB_MISSING",
    "ContractViolation",
    "FakeKernels",
    "FakeTorchNpu",
    "KernelCall",
    "install",
    "load_record",
    "locked_torch_npu_version",
    "signature_from_text",
]
