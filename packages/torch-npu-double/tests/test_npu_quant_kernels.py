"""The emulated quantization kernels (``emulation.kernels_quant``): their math against the
formulas written out in float64 here, and each documented limit at its boundary (the harness
README's "Enforced contracts"). One fresh process (the device install is process-wide) runs
every case."""

from __future__ import annotations

from typing import Any

import pytest
from torch_npu_double.fresh_interpreter import ATTEMPT
from torch_npu_double.fresh_interpreter import run_json as run

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "1"}


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    return run("""
        import json, struct, torch, torch_npu
        g = torch.Generator().manual_seed(0)
        npu = lambda t: t.to("npu")
        x1 = torch.randint(-128, 128, (3, 8), generator=g, dtype=torch.int8)
        x2 = torch.randint(-128, 128, (8, 5), generator=g, dtype=torch.int8)
        scale = torch.rand(5, generator=g) / 100 + 1e-3
        bias = torch.randint(-1000, 1000, (5,), generator=g, dtype=torch.int32)
        tok = torch.rand(3, generator=g) + 0.5
        acc = x1.double() @ x2.double()
        def qmm(a=x1, b=x2, s=scale, **kw):
            kw = {k: npu(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
            return torch_npu.npu_quant_matmul(npu(a), npu(b), npu(s), **kw).cpu()
        got = qmm(bias=bias, output_dtype=torch.bfloat16)
        want = ((acc + bias.double()) * scale.double()).to(torch.bfloat16)
        out["static_bf16"] = [got.dtype == torch.bfloat16, bool(torch.equal(got, want))]
        bits = torch.tensor([struct.unpack("<I", struct.pack("<f", v))[0]
                             for v in scale.tolist()], dtype=torch.int64)
        got = qmm(s=bits, bias=bias, output_dtype=torch.float16)
        want = ((acc + bias.double()) * scale.double()).to(torch.float16)
        out["static_fp16_int64_scale"] = bool(torch.equal(got, want))
        got = qmm(pertoken_scale=tok, output_dtype=torch.float16)
        want = (acc * scale.double() * tok.double().reshape(-1, 1)).to(torch.float16)
        out["pertoken_fp16"] = bool(torch.allclose(got.double(), want.double(), rtol=1e-3))
        big = torch.ones(1, 65535, dtype=torch.int8)
        attempt("k_65535", lambda: qmm(big, torch.ones(65535, 1, dtype=torch.int8),
                                       torch.ones(1), output_dtype=torch.bfloat16))
        attempt("k_65536", lambda: qmm(torch.ones(1, 65536, dtype=torch.int8),
                                       torch.ones(65536, 1, dtype=torch.int8),
                                       torch.ones(1), output_dtype=torch.bfloat16))
        attempt("x1_fp16", lambda: qmm(a=x1.half(), output_dtype=torch.float16))
        attempt("x2_transposed", lambda: qmm(b=x2.t().contiguous(), output_dtype=torch.bfloat16))
        attempt("x1_7_dims", lambda: qmm(a=x1.reshape(1, 1, 1, 1, 1, 3, 8),
                                         output_dtype=torch.bfloat16))
        attempt("x1_6_dims", lambda: qmm(a=x1.reshape(1, 1, 1, 1, 3, 8),
                                         output_dtype=torch.bfloat16))
        attempt("scale_wrong_size", lambda: qmm(s=scale[:2], output_dtype=torch.bfloat16))
        attempt("scale_one_value", lambda: qmm(s=scale[:1], output_dtype=torch.bfloat16))
        attempt("out_fp32", lambda: qmm(output_dtype=torch.float32))
        attempt("fp16_pertoken_bf16_scale", lambda: qmm(s=scale.bfloat16(), pertoken_scale=tok,
                                                       output_dtype=torch.float16))
        attempt("bf16_pertoken_bf16_scale", lambda: qmm(s=scale.bfloat16(), pertoken_scale=tok,
                                                       output_dtype=torch.bfloat16))
        attempt("pertoken_wrong_rows", lambda: qmm(pertoken_scale=tok[:2],
                                                   output_dtype=torch.bfloat16))
        attempt("pertoken_dtype_fp16", lambda: qmm(pertoken_scale=tok.half(),
                                             output_dtype=torch.bfloat16))
        attempt("int64_scale_upper_bits", lambda: qmm(s=bits | (1 << 40),
                                                      output_dtype=torch.float16))
        attempt("offset_with_bf16_out", lambda: qmm(offset=scale, output_dtype=torch.bfloat16))
        attempt("bias_bf16_fp16_out", lambda: qmm(bias=bias.bfloat16(),
                                                  output_dtype=torch.float16))
        attempt("bias_bf16_bf16_out", lambda: qmm(bias=bias.bfloat16(),
                                                  output_dtype=torch.bfloat16))
        attempt("bias_wrong_size", lambda: qmm(bias=bias[:4], output_dtype=torch.bfloat16))

        x = torch.randn(4, 6, generator=g).to(torch.bfloat16)
        s, o = torch.tensor([0.02]), torch.tensor([3], dtype=torch.int8)
        got = torch_npu.npu_quantize(npu(x), npu(s), npu(o), torch.qint8, -1, True).cpu()
        want = torch.clamp(torch.round(x.double() / 0.02 + 3), -128, 127).to(torch.int8)
        out["quantize"] = [got.dtype == torch.int8, bool(torch.equal(got, want))]
        attempt("quantize_quint8", lambda: torch_npu.npu_quantize(
            npu(x), npu(s), npu(o), torch.quint8, -1, True))
        attempt("quantize_scales_3", lambda: torch_npu.npu_quantize(
            npu(x), npu(torch.ones(3)), None, torch.qint8, -1, True))
        attempt("quantize_scales_6", lambda: torch_npu.npu_quantize(
            npu(x), npu(torch.ones(6)), None, torch.qint8, -1, True))
        q, sc = torch_npu.npu_dynamic_quant(npu(x))
        amax = x.double().abs().amax(dim=-1, keepdim=True) / 127
        want = torch.clamp(torch.round(x.double() / amax), -128, 127).to(torch.int8)
        out["dynamic_quant"] = [bool(torch.equal(q.cpu(), want)),
                                bool(torch.allclose(sc.cpu().double(), amax.squeeze(-1)))]
        attempt("dynamic_quant_fp32", lambda: torch_npu.npu_dynamic_quant(npu(x.float())))
        nz = torch_npu.npu_format_cast(npu(x2), 29)
        out["format_cast_keeps_values"] = bool(torch.equal(nz.cpu(), x2))
        attempt("format_cast_nz_1d", lambda: torch_npu.npu_format_cast(npu(scale), 29))
        attempt("format_cast_nc1hwc0", lambda: torch_npu.npu_format_cast(npu(x2), 3))
        got = torch_npu.npu_quant_matmul(npu(x1), nz, npu(scale), output_dtype=torch.bfloat16)
        out["nz_weight"] = bool(torch.equal(got.cpu(), (acc * scale.double()).bfloat16()))
        print(json.dumps(out))
    """, EMU, prelude=ATTEMPT)


def test_quant_matmul_computes_the_documented_dequantization(cases) -> None:
    assert cases["static_bf16"] == [True, True]
    assert cases["static_fp16_int64_scale"] is True
    assert cases["pertoken_fp16"] is True
    assert cases["nz_weight"] is True


@pytest.mark.parametrize(("case", "message"), [
    ("k_65536", "K=65536, N=1: the last dims may not exceed 65535"),
    ("x1_fp16", "x1 has dtype float16; allowed: int8"),
    ("x2_transposed", "x2 is [5, 8]; it must be [..., K=8, N]"),
    ("x1_7_dims", "x1 has 7 dims; allowed: 2-6"),
    ("scale_wrong_size", "scale has shape [2]; it must be 1-D (t,), t=1 or n=5"),
    ("out_fp32", "output_dtype torch.float32 is not allowed"),
    ("fp16_pertoken_bf16_scale", "scale has dtype bfloat16; allowed: float32"),
    ("pertoken_wrong_rows", "pertoken_scale has shape [2]; it must be 1-D (m,) = (3,)"),
    ("pertoken_dtype_fp16", "pertoken_scale has dtype float16; allowed: float32"),
    ("int64_scale_upper_bits", "scale int64 has bits above the low 32 set"),
    ("offset_with_bf16_out", "offset is allowed with an int8 output only"),
    ("bias_bf16_fp16_out", "bias has dtype bfloat16; allowed: int32, float16, float32"),
    ("bias_wrong_size", "bias has shape [4]; allowed (n,) or (1, n) with n=5"),
])  # fmt: skip
def test_quant_matmul_refuses_outside_its_documented_limits(cases, case: str,
                                                            message: str) -> None:
    assert cases[case].startswith("torch_npu.npu_quant_matmul: ")
    assert message in cases[case]


@pytest.mark.parametrize("case", ["k_65535", "x1_6_dims", "scale_one_value",
                                  "bf16_pertoken_bf16_scale", "bias_bf16_bf16_out"])
def test_quant_matmul_accepts_each_limits_allowed_side(cases, case: str) -> None:
    assert cases[case] == "ok"


def test_quantize_and_dynamic_quant_compute_the_formulas(cases) -> None:
    assert cases["quantize"] == [True, True]
    assert cases["dynamic_quant"] == [True, True]
    assert cases["format_cast_keeps_values"] is True


@pytest.mark.parametrize(("case", "message"), [
    ("quantize_quint8", "torch_npu.npu_quantize: dtype"),
    ("quantize_scales_3", "scales has shape [3]; allowed: [1] or [6]"),
    ("dynamic_quant_fp32", "input has dtype torch.float32; allowed: float16, bfloat16"),
    ("format_cast_nz_1d", "NZ needs at least 2 dims, got 1"),
    ("format_cast_nc1hwc0", "acl_format 3 is not emulated"),
])  # fmt: skip
def test_quantize_dynamic_quant_and_format_cast_refuse_outside_their_limits(
    cases, case: str, message: str
) -> None:
    assert message in cases[case]
    assert cases["quantize_scales_6"] == "ok"
