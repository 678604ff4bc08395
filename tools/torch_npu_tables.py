"""What ``tools/torch_npu_schemas.py`` records about each torch_npu op and API the project
uses: output rules (checked against the wheel's meta functions by ``tools/tests``), the
documented input constraints (each quoting ``_op_plugin_docs.py``; a quote missing from the
wheel stops the tool) and where the ``torch_npu.npu`` APIs are defined.

A new op or API called from ``packages/*/src`` is added here;
``packages/torch-npu-double/tests/test_seam.py`` fails until it is.
"""

from __future__ import annotations

from typing import Any

# Output rules, one entry per output, in the meta functions' order. dtype: "like:<arg>",
# a torch dtype name, "quant:<arg>" (npu_quantize's dtype table), "fp8:<arg>" (MX: e5m2 /
# e4m3 / packed fp4 as uint8, from the dst_type id). shape: "like:<arg>", "rows:<arg>"
# (all but the last dim), "rstd:<x>,<gamma>", "mxscale:<arg>" ([..., ceil(ceil(H/32)/2), 2]),
# "half:<arg>,<dim arg>" and "fp8:<arg>" (halved last dim for fp4). "mask": [arg, index]
# gives shape [0] when that output is switched off (see npu_add_rms_norm_dynamic_quant).
OUTPUTS: dict[str, list[dict[str, Any]]] = {
    "npu_rms_norm": [
        {"name": "y", "dtype": "like:input", "shape": "like:input"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:input,gamma"},
    ],
    "npu_add_rms_norm": [
        {"name": "y", "dtype": "like:x1", "shape": "like:x1"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:x1,gamma"},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
    ],
    "npu_quantize": [{"name": "y", "dtype": "quant:dtype", "shape": "like:input"}],
    "npu_dynamic_quant": [
        {"name": "y", "dtype": "int8", "shape": "like:input"},
        {"name": "scale", "dtype": "float32", "shape": "rows:input"},
    ],
    "npu_add_rms_norm_quant": [
        {"name": "y1", "dtype": "int8", "shape": "like:x1"},
        {"name": "y2", "dtype": "int8", "shape": "like:x1"},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
    ],
    "npu_add_rms_norm_dynamic_quant": [
        {"name": "y1", "dtype": "int8", "shape": "like:x1", "mask": ["output_mask", 0]},
        {"name": "y2", "dtype": "int8", "shape": "like:x1", "mask": ["output_mask", 1]},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
        {"name": "scale1", "dtype": "float32", "shape": "rows:x1", "mask": ["output_mask", 0]},
        {"name": "scale2", "dtype": "float32", "shape": "rows:x1", "mask": ["output_mask", 1]},
    ],
    "npu_dynamic_mx_quant": [
        {"name": "y", "dtype": "fp8:dst_type", "shape": "fp8:input"},
        {"name": "mxscale", "dtype": "uint8", "shape": "mxscale:input"},
    ],
    "npu_add_rms_norm_dynamic_mx_quant": [
        {"name": "y", "dtype": "fp8:dst_type", "shape": "fp8:x1"},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
        {"name": "mxscale", "dtype": "uint8", "shape": "mxscale:x1"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:x1,gamma"},
    ],
    "npu_rms_norm_dynamic_mx_quant": [
        {"name": "y", "dtype": "fp8:dst_type", "shape": "fp8:x"},
        {"name": "mxscale", "dtype": "uint8", "shape": "mxscale:x"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:x,gamma"},
    ],
    "npu_swiglu": [{"name": "y", "dtype": "like:input", "shape": "half:input,dim"}],
    "npu_mrope": [
        {"name": "query_out", "dtype": "like:query", "shape": "like:query"},
        {"name": "key_out", "dtype": "like:key", "shape": "like:key"},
    ],
    "npu_format_cast": [{"name": "y", "dtype": "like:input", "shape": "like:input"}],
    # In place on query and key (schema: Tensor(a!) query, Tensor(b!) key) -> ().
    "_npu_rotary_embedding": [],
    # Unquantized: attention_out like query (same head size for value); softmax_lse
    # [T, N, 1] float32 for TND with softmax_lse_flag, else [0] ("flag").
    "npu_fused_infer_attention_score": [
        {"name": "attention_out", "dtype": "like:query", "shape": "like:query"},
        {"name": "softmax_lse", "dtype": "float32", "shape": "lse:query",
         "flag": "softmax_lse_flag"},
    ],
    # In place on key_cache and value_cache -> ().
    "npu_scatter_pa_kv_cache": [],
}

# Where each op's meta function is registered (npu_format_cast has none of its own; the
# private _npu_format_cast keeps the input's shape and dtype) and which ops are ATB ops.
META_NAMES = {op: op for op in OUTPUTS} | {"npu_format_cast": "_npu_format_cast"}
META_NAMES.pop("_npu_rotary_embedding")
ATB_OPS = {"_npu_rotary_embedding": "AtbOpsInterface.h"}

# The documented input constraints the project relies on (A2/A3 rows of the docs). Kinds:
# dtypes (allowed dtype names), dims ([min, max] rank), dtype_like / shape_like (another
# argument's), multiple_of (a dim of one argument by the dtype of another), min_size (a dim's
# least size for inputs of the listed dtypes). "when" limits a
# rule to calls with those argument values; "doc" is the docs text the rule rests on.
_A2 = "Atlas A2 训练系列产品/Atlas 800I A2 推理产品: 数据类型支持"
_MROPE_2D = "queryIn、keyIn、cosSinCache只支持2维shape输入。"
_BETA = "beta: Tensor类型，归一化偏置项。可选，shape和数据类型与gamma一致。"


def _rule(arg: str, doc: str, **kind: Any) -> dict[str, Any]:
    return {"arg": arg, "doc": doc, **kind}


CONSTRAINTS: dict[str, list[dict[str, Any]]] = {
    "npu_rms_norm": [
        _rule("input", "self：Tensor类型，支持float16、bfloat16、float32",
              dtypes=["float16", "bfloat16", "float32"]),
        _rule("input", "输入shape支持2-8维", dims=[2, 8]),
        _rule("gamma", "gamma：Tensor类型，数据类型需要和self保持一致", dtype_like="input"),
    ],
    "npu_quantize": [
        _rule("scales", _A2 + "float、bfloat16.", dtypes=["float32", "bfloat16"],
              when={"div_mode": True}),
        _rule("zero_points", _A2 + "int8、uint8、int32、bfloat16.",
              dtypes=["int8", "uint8", "int32", "bfloat16"], when={"div_mode": True}),
        _rule("input", _A2 + "float、float16、bfloat16.",
              dtypes=["float32", "float16", "bfloat16"]),
    ],
    "npu_dynamic_quant": [
        _rule("input", "数据类型支持torch.float16、torch.bfloat16", dtypes=["float16", "bfloat16"]),
        _rule("input", "输入x的维度必须大于1", dims=[2, 8]),
    ],
    "npu_add_rms_norm_quant": [
        _rule("x1", "shape支持1-8维。数据类型支持BFLOAT16、FLOAT16",
              dtypes=["bfloat16", "float16"]),
        _rule("x1", "shape支持1-8维", dims=[1, 8]),
        _rule("gamma", "数据类型需要与入参x1保持一致。不支持空tensor。", dtype_like="x1"),
        _rule("scales1", "表示量化过程中得到y1进行的scales张量。shape需要与gamma保持一致。",
              shape_like="gamma"),
        _rule("scales1", "数据类型支持FLOAT32、BFLOAT16", dtypes=["float32", "bfloat16"]),
        _rule("zero_points1", "可选参数。shape需要与gamma保持一致。数据类型支持INT32、BFLOAT16",
              shape_like="gamma"),
        _rule("zero_points1", "数据类型支持INT32、BFLOAT16", dtypes=["int32", "bfloat16"]),
        _rule("beta", "shape需要与gamma的shape保持一致", shape_like="gamma"),
        _rule("beta", "数据类型需要与gamma保持一致", dtype_like="gamma"),
    ],
    "npu_add_rms_norm_dynamic_quant": [
        _rule("x1", "shape支持2-8维，数据类型支持FLOAT16、BFLOAT16",
              dtypes=["float16", "bfloat16"]),
        _rule("x1", "shape支持2-8维", dims=[2, 8]),
        _rule("gamma", "需与x1最后一维一致，数据类型与x1一致", dtype_like="x1"),
        _rule("beta", _BETA, dtype_like="gamma"),
        _rule("beta", _BETA, shape_like="gamma"),
    ],
    "npu_dynamic_mx_quant": [
        _rule("input", "支持1-7维，数据类型支持float16、bfloat16、float32",
              dtypes=["float16", "bfloat16", "float32"]),
        _rule("input", "支持1-7维", dims=[1, 7]),
        _rule("input", "当input的数据类型为float32时，block_size必须为32，且量化轴的维度不能小于32",
              min_size={"dim": -1, "size": 32, "dtypes": ["float32"]}),
    ],
    "npu_fused_infer_attention_score": [
        _rule("query", "query: Tensor类型, attention结构的Query输入, "
              "数据类型支持float16、bfloat16、int8",
              dtypes=["float16", "bfloat16", "int8"]),
        _rule("atten_mask", "atten_mask: Tensor类型, 对QK的结果进行mask, "
              "用于指示是否计算Token间的相关性, 数据类型支持bool、int8和uint8",
              dtypes=["bool", "int8", "uint8"]),
        _rule("block_table", "page attention场景下, block_table必须为二维", dims=[2, 2]),
    ],
    "npu_scatter_pa_kv_cache": [
        _rule("key", "支持3维或4维。数据类型支持float16、float、bfloat16、int8、uint8、"
              "int16、uint16、int32、uint32、hifloat8、float8_e5m2、float8_e4m3fn",
              dtypes=["float16", "float32", "bfloat16", "int8", "uint8", "int16", "uint16",
                      "int32", "uint32", "float8_e5m2", "float8_e4m3fn"]),
        _rule("key", "支持3维或4维", dims=[3, 4]),
        _rule("value", "key、value、key_cache、value_cache的数据类型必须一致", dtype_like="key"),
        _rule("key_cache", "key、value、key_cache、value_cache的数据类型必须一致",
              dtype_like="key"),
        _rule("value_cache", "key、value、key_cache、value_cache的数据类型必须一致",
              dtype_like="key"),
        _rule("key_cache", "当前layer的key cache，只支持4维", dims=[4, 4]),
        _rule("value_cache", "当前layer的value cache。只支持4维", dims=[4, 4]),
        _rule("slot_mapping", "slot_mapping（Tensor）：必选参数，"
              "表示每个token key或value在cache中的存储偏移，数据类型支持int32和int64",
              dtypes=["int32", "int64"]),
    ],
    "npu_swiglu": [
        _rule("input", "dtype支持FP32、FP16或BF16类型", dtypes=["float32", "float16", "bfloat16"]),
        _rule("input", "shape支持1-8维", dims=[1, 8]),
    ],
    "npu_mrope": [
        _rule("query", _MROPE_2D, dims=[2, 2]),
        _rule("key", _MROPE_2D, dims=[2, 2]),
        _rule("cos_sin_cache", _MROPE_2D, dims=[2, 2]),
        _rule("cos_sin_cache", "当输入是BFLOAT16或FLOAT16时，rotary_dim要求是32的倍数，"
              "当输入是FLOAT32时，rotary_dim要求是16的倍数。",
              multiple_of={"dim": 1, "by_dtype_of": "query",
                           "multiples": {"bfloat16": 32, "float16": 32, "float32": 16}}),
    ],
}

# Kernels recorded by schema only (no output rule): the emulated npu device
# (torch_npu_double.emulation) binds calls to them; the NPU runtime's attention calls them.
KERNEL_SCHEMAS = [
    "npu_fused_infer_attention_score", "npu_scatter_pa_kv_cache", "npu_top_k_top_p",
    # FULL-graph attention: the workspace taken once at capture and the FIA form that writes
    # into given outputs with it (the only form a task update may re-issue).
    "npu_fused_infer_attention_score.out", "_npu_fused_infer_attention_score_get_max_workspace",
    # transformers imports it when torch_npu is present (integrations/npu_flash_attention.py).
    "npu_fusion_attention",
    # W8A8 linear layers on the NPU runtime (vllm_ascend.quantization.npu_linear_methods): the
    # int8 matmul with its dequantization.
    "npu_quant_matmul",
    # MoE (reference/npu-moe-quant-facts.md §1-2): gating top-k, routing, permute/unpermute,
    # the grouped matmul of the experts and MC2's dispatch/combine; emulated strictly by
    # torch_npu_double.emulation.kernels_moe.
    "npu_moe_gating_top_k", "npu_moe_init_routing_v2", "npu_grouped_matmul",
    "npu_moe_token_permute", "npu_moe_token_unpermute",
    "npu_moe_distribute_dispatch_v2", "npu_moe_distribute_combine_v2",
]

# torch_npu.npu APIs the project calls: public name -> (file under torch_npu/, qualname).
PYTHON_APIS: dict[str, tuple[str, str]] = {
    "get_soc_version": ("npu/_backends.py", "get_soc_version"),
    "current_stream": ("npu/utils.py", "current_stream"),
    "stream": ("npu/utils.py", "stream"),
    "set_device": ("npu/utils.py", "set_device"),
    "synchronize": ("npu/utils.py", "synchronize"),
    "get_device_name": ("npu/__init__.py", "get_device_name"),
    "get_device_properties": ("npu/__init__.py", "get_device_properties"),
    "device_count": ("npu/__init__.py", "device_count"),
    "reset_peak_memory_stats": ("npu/memory.py", "reset_peak_memory_stats"),
    "max_memory_allocated": ("npu/memory.py", "max_memory_allocated"),
    "empty_cache": ("npu/memory.py", "empty_cache"),
    "host_empty_cache": ("npu/memory.py", "host_empty_cache"),
    "graph_pool_handle": ("npu/graphs.py", "graph_pool_handle"),
    "Stream": ("npu/streams.py", "Stream.__new__"),
    "Stream.synchronize": ("npu/streams.py", "Stream.synchronize"),
    "NPUGraph": ("npu/graphs.py", "NPUGraph.__init__"),
    "NPUGraph.replay": ("npu/graphs.py", "NPUGraph.replay"),
    "NPUGraph.capture_begin": ("npu/graphs.py", "NPUGraph.capture_begin"),
    "NPUGraph.capture_end": ("npu/graphs.py", "NPUGraph.capture_end"),
    "graph": ("npu/graphs.py", "graph.__init__"),
    # The rest of the upstream dense path's torch.npu APIs (npu-runtime-facts 1.2), which the
    # emulated device (torch_npu_double.emulation) binds every call to.
    "current_device": ("npu/utils.py", "current_device"),
    "device": ("npu/utils.py", "device.__init__"),
    "set_stream": ("npu/utils.py", "set_stream"),
    "default_stream": ("npu/utils.py", "default_stream"),
    "is_available": ("npu/__init__.py", "is_available"),
    "mem_get_info": ("npu/__init__.py", "mem_get_info"),
    "manual_seed_all": ("npu/random.py", "manual_seed_all"),
    "memory_stats": ("npu/memory.py", "memory_stats"),
    "memory_allocated": ("npu/memory.py", "memory_allocated"),
    "memory_reserved": ("npu/memory.py", "memory_reserved"),
    "max_memory_reserved": ("npu/memory.py", "max_memory_reserved"),
    "reset_max_memory_allocated": ("npu/memory.py", "reset_max_memory_allocated"),
    "reset_accumulated_memory_stats": ("npu/memory.py", "reset_accumulated_memory_stats"),
    "Stream.wait_event": ("npu/streams.py", "Stream.wait_event"),
    "Stream.wait_stream": ("npu/streams.py", "Stream.wait_stream"),
    "Stream.record_event": ("npu/streams.py", "Stream.record_event"),
    "Stream.query": ("npu/streams.py", "Stream.query"),
    "Event": ("npu/streams.py", "Event.__new__"),
    "Event.record": ("npu/streams.py", "Event.record"),
    "Event.wait": ("npu/streams.py", "Event.wait"),
    "Event.query": ("npu/streams.py", "Event.query"),
    "Event.elapsed_time": ("npu/streams.py", "Event.elapsed_time"),
    "Event.synchronize": ("npu/streams.py", "Event.synchronize"),
    "ExternalEvent": ("npu/streams.py", "ExternalEvent.__new__"),
    "ExternalEvent.record": ("npu/streams.py", "ExternalEvent.record"),
    "ExternalEvent.wait": ("npu/streams.py", "ExternalEvent.wait"),
    "ExternalEvent.reset": ("npu/streams.py", "ExternalEvent.reset"),
    "is_current_stream_capturing": ("npu/graphs.py", "is_current_stream_capturing"),
    "graph_task_group_begin": ("npu/graphs.py", "graph_task_group_begin"),
    "graph_task_group_end": ("npu/graphs.py", "graph_task_group_end"),
    "graph_task_update_begin": ("npu/graphs.py", "graph_task_update_begin"),
    "graph_task_update_end": ("npu/graphs.py", "graph_task_update_end"),
    "NPUGraph.reset": ("npu/graphs.py", "NPUGraph.reset"),
    "NPUGraph.pool": ("npu/graphs.py", "NPUGraph.pool"),
    "NPUGraph.update": ("npu/graphs.py", "NPUGraph.update"),
    "config.__setattr__": ("npu/npu_config.py", "_npuConfig.__setattr__"),
}


