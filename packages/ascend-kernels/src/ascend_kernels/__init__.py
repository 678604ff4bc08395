"""The ``torch.ops.ascend.*`` operator library.

Importing this package defines every op of ``ops.SPECS`` with a plain-torch reference
implementation (any device) and a fake implementation (torch.compile), plus the torch_npu
kernels when ``torch_npu`` imports cleanly. It never imports vLLM.
"""

from __future__ import annotations

from ascend_kernels.capability import supports
from ascend_kernels.layout import aligned_16, nd_to_nz_2d, nd_to_nz_spec, trans_nd_to_nz
from ascend_kernels.meta_registration import register_meta_if_necessary
from ascend_kernels.npu_loader import npu_registration
from ascend_kernels.ops import OP_NAMES, SCHEMAS
from ascend_kernels.registration import register_all
from ascend_kernels.validation import DeviceMismatchError
from ascend_kernels.weight_format import (
    ACL_FORMAT_FRACTAL_NZ,
    dispose_tensor,
    maybe_trans_nz,
    nz_cast_wanted,
)

__all__ = [
    "ACL_FORMAT_FRACTAL_NZ",
    "OP_NAMES",
    "SCHEMAS",
    "DeviceMismatchError",
    "aligned_16",
    "dispose_tensor",
    "maybe_trans_nz",
    "nd_to_nz_2d",
    "nd_to_nz_spec",
    "npu_registration",
    "nz_cast_wanted",
    "register_meta_if_necessary",
    "supports",
    "trans_nd_to_nz",
]

__version__ = "0.1.0"

register_all()
npu_registration.load_if_available()
