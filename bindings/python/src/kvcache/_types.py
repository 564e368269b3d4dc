"""Enumerations and option records of the kvcache C ABI, in Python form."""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from . import _lib


# The enumerations list their members by name on purpose, alike as they look: type checkers and the
# documentation see the names.
class LayerKind(enum.IntEnum):
    """Layer kinds (``kvc_layer_kind``): what one layer of a cache stores."""

    DYNAMIC = _lib.KVC_LAYER_DYNAMIC
    DYNAMIC_SLIDING = _lib.KVC_LAYER_DYNAMIC_SLIDING
    DYNAMIC_CHUNKED = _lib.KVC_LAYER_DYNAMIC_CHUNKED
    STATIC = _lib.KVC_LAYER_STATIC
    STATIC_SLIDING = _lib.KVC_LAYER_STATIC_SLIDING
    STATIC_CHUNKED = _lib.KVC_LAYER_STATIC_CHUNKED
    QUANTIZED = _lib.KVC_LAYER_QUANTIZED
    SINK = _lib.KVC_LAYER_SINK
    LINEAR = _lib.KVC_LAYER_LINEAR
    LINEAR_DYNAMIC = _lib.KVC_LAYER_LINEAR_DYNAMIC
    LINEAR_DYNAMIC_SLIDING = _lib.KVC_LAYER_LINEAR_DYNAMIC_SLIDING
    LINEAR_STATIC = _lib.KVC_LAYER_LINEAR_STATIC
    LINEAR_STATIC_SLIDING = _lib.KVC_LAYER_LINEAR_STATIC_SLIDING
    QUANTIZED_FP8 = _lib.KVC_LAYER_QUANTIZED_FP8
    DUMMY = _lib.KVC_LAYER_DUMMY
    DYNAMIC_INDEXED = _lib.KVC_LAYER_DYNAMIC_INDEXED
    STATIC_INDEXED = _lib.KVC_LAYER_STATIC_INDEXED


class LayerType(enum.IntEnum):
    """Per-layer attention types of a model configuration (``config.layer_types``)."""

    FULL_ATTENTION = _lib.KVC_LAYER_TYPE_FULL_ATTENTION
    SLIDING_ATTENTION = _lib.KVC_LAYER_TYPE_SLIDING_ATTENTION
    CHUNKED_ATTENTION = _lib.KVC_LAYER_TYPE_CHUNKED_ATTENTION
    LINEAR_ATTENTION = _lib.KVC_LAYER_TYPE_LINEAR_ATTENTION
    HYBRID = _lib.KVC_LAYER_TYPE_HYBRID
    HYBRID_SLIDING = _lib.KVC_LAYER_TYPE_HYBRID_SLIDING
    DUMMY = _lib.KVC_LAYER_TYPE_DUMMY
    INDEXED_ATTENTION = _lib.KVC_LAYER_TYPE_INDEXED_ATTENTION


#: transformers' layer type strings and the LayerType each maps to
#: (docs/semantics.md, 'Layer types and presets'), as transformers 5.23 and later map them:
#: "moe" and "mlp" are dummy layers there (LINEAR_ATTENTION before 5.23; pass a LayerType to choose).
LAYER_TYPE_NAMES: Mapping[str, LayerType] = {
    "full_attention": LayerType.FULL_ATTENTION,
    "attention": LayerType.FULL_ATTENTION,
    "sliding_attention": LayerType.SLIDING_ATTENTION,
    "chunked_attention": LayerType.CHUNKED_ATTENTION,
    "linear_attention": LayerType.LINEAR_ATTENTION,
    "conv": LayerType.LINEAR_ATTENTION,
    "mamba": LayerType.LINEAR_ATTENTION,
    "moe": LayerType.DUMMY,
    "mlp": LayerType.DUMMY,
    "hybrid": LayerType.HYBRID,
    "hybrid_sliding": LayerType.HYBRID_SLIDING,
    "dummy": LayerType.DUMMY,
    "indexed_attention": LayerType.INDEXED_ATTENTION,
    "deepseek_sparse_attention": LayerType.INDEXED_ATTENTION,  # its name in earlier releases (5.17)
}


class Preset(enum.IntEnum):
    """How ``kvc_cache_create`` builds the layer list (the transformers cache classes)."""

    CUSTOM = _lib.KVC_PRESET_CUSTOM
    DYNAMIC = _lib.KVC_PRESET_DYNAMIC
    STATIC = _lib.KVC_PRESET_STATIC
    SLIDING_WINDOW = _lib.KVC_PRESET_SLIDING_WINDOW
    HYBRID = _lib.KVC_PRESET_HYBRID
    HYBRID_CHUNKED = _lib.KVC_PRESET_HYBRID_CHUNKED
    QUANTIZED = _lib.KVC_PRESET_QUANTIZED
    OFFLOADED = _lib.KVC_PRESET_OFFLOADED
    OFFLOADED_STATIC = _lib.KVC_PRESET_OFFLOADED_STATIC
    OFFLOADED_HYBRID = _lib.KVC_PRESET_OFFLOADED_HYBRID
    SINK = _lib.KVC_PRESET_SINK
    MAMBA = _lib.KVC_PRESET_MAMBA
    HYBRID_MAMBA = _lib.KVC_PRESET_HYBRID_MAMBA


class Offload(enum.IntEnum):
    """Offloading mode of a cache (``kvc_offload``)."""

    DEFAULT = _lib.KVC_OFFLOAD_DEFAULT
    NONE = _lib.KVC_OFFLOAD_NONE
    ALL = _lib.KVC_OFFLOAD_ALL
    NON_SLIDING = _lib.KVC_OFFLOAD_NON_SLIDING


class Dtype(enum.IntEnum):
    """Storage dtypes (``kvc_dtype``)."""

    UNSET = _lib.KVC_DTYPE_UNSET
    FLOAT32 = _lib.KVC_DTYPE_FLOAT32
    FLOAT16 = _lib.KVC_DTYPE_FLOAT16
    BFLOAT16 = _lib.KVC_DTYPE_BFLOAT16


class Quantizer(enum.IntEnum):
    QUANTO = _lib.KVC_QUANTIZER_QUANTO
    HQQ = _lib.KVC_QUANTIZER_HQQ


QuantMode = enum.IntEnum("QuantMode", {  # type: ignore[misc]
    name[len("KVC_QUANT_MODE_"):]: getattr(_lib, name) for name in dir(_lib) if name.startswith("KVC_QUANT_MODE_")})
QuantMode.__doc__ = "Quantized layer modes (kvc_quant_mode): INCREMENTAL, TRANSFORMERS, ... as the header has them."


class DeviceType(enum.IntEnum):
    """DLPack device types kvcache knows."""

    CPU = _lib.KVC_DEVICE_CPU
    CUDA = _lib.KVC_DEVICE_CUDA
    CUDA_HOST = _lib.KVC_DEVICE_CUDA_HOST
    ROCM = _lib.KVC_DEVICE_ROCM
    ROCM_HOST = _lib.KVC_DEVICE_ROCM_HOST


_DEVICE_NAMES = {"cpu": DeviceType.CPU, "cuda": DeviceType.CUDA, "cuda_host": DeviceType.CUDA_HOST,
                 "rocm": DeviceType.ROCM, "hip": DeviceType.ROCM, "rocm_host": DeviceType.ROCM_HOST}

DeviceLike = Union[str, Tuple[int, int], Any]
DtypeLike = Union[str, Dtype, Any]


def parse_device(device: DeviceLike) -> Tuple[int, int]:
    """``"cpu"``, ``"cuda:1"``, ``torch.device(...)`` or ``(device_type, id)`` as a DLPack pair."""
    if device is None:
        return (int(DeviceType.CPU), 0)
    if isinstance(device, tuple) and len(device) == 2:
        return (int(device[0]), int(device[1]))
    text = str(device).lower()
    name, _, index = text.partition(":")
    if name not in _DEVICE_NAMES:
        raise ValueError(f"device {device!r}: expected 'cpu', 'cuda[:N]', 'rocm[:N]' or (device_type, id)")
    if index and not index.isdigit():
        raise ValueError(f"device {device!r}: the index must be a non-negative integer")
    return (int(_DEVICE_NAMES[name]), int(index) if index else 0)


def parse_dtype(dtype: DtypeLike) -> Dtype:
    """``"float32"``, ``torch.bfloat16``, ``numpy.float16``, a :class:`Dtype` ... as a :class:`Dtype`."""
    if isinstance(dtype, Dtype):
        return dtype
    if isinstance(dtype, int):
        return Dtype(dtype)
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    text = str(name if isinstance(name, str) else dtype).lower().replace("torch.", "").replace("numpy.", "")
    text = text.replace("<class '", "").replace("'>", "")
    table = {"float32": Dtype.FLOAT32, "float": Dtype.FLOAT32, "f4": Dtype.FLOAT32,
             "float16": Dtype.FLOAT16, "half": Dtype.FLOAT16, "f2": Dtype.FLOAT16,
             "bfloat16": Dtype.BFLOAT16}
    if text not in table:
        raise TypeError(f"dtype {dtype!r}: kvcache stores float32, float16 or bfloat16")
    return table[text]


def _int(value: Any, name: str, low: int = 0, high: int = 2**63 - 1) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if v < low or v > high:
        raise ValueError(f"{name} is {v}; it must be in [{low}, {high}]")
    return v


def _opt_int(value: Any) -> int:
    return 0 if value is None else operator.index(value)


@dataclass(frozen=True)
class QuantOptions:
    """How a quantized layer quantizes (``kvc_quant_options``; transformers' QuantizedCache arguments).

    Example:
        >>> QuantOptions(quantizer="hqq", nbits=2, axis_key=1, axis_value=1, q_group_size=32)
        QuantOptions(quantizer='hqq', mode='incremental', nbits=2, axis_key=1, axis_value=1, q_group_size=32, residual_length=128)
    """

    quantizer: str = "quanto"
    mode: str = "incremental"
    nbits: int = 4
    axis_key: int = 0
    axis_value: int = 0
    q_group_size: int = 64
    residual_length: int = 128

    def _to_lib(self) -> Any:
        q = _lib.kvc_quant_options()
        names = {"quanto": Quantizer.QUANTO, "hqq": Quantizer.HQQ}
        modes = {m.name.lower(): m for m in QuantMode}
        if str(self.quantizer).lower() not in names:
            raise ValueError(f"quantizer {self.quantizer!r}: expected 'quanto' or 'hqq'")
        if str(self.mode).lower() not in modes:
            raise ValueError(f"mode {self.mode!r}: expected one of {sorted(modes)}")
        q.quantizer = int(names[str(self.quantizer).lower()])
        q.mode = int(modes[str(self.mode).lower()])
        q.nbits = operator.index(self.nbits)
        q.axis_key = operator.index(self.axis_key)
        q.axis_value = operator.index(self.axis_value)
        q.q_group_size = operator.index(self.q_group_size)
        q.residual_length = operator.index(self.residual_length)
        return q


@dataclass(frozen=True)
class LayerSpec:
    """One layer of a :class:`CustomCache` (``kvc_layer_options``).

    Example:
        >>> LayerSpec(LayerKind.DYNAMIC_SLIDING, window=4096)
        LayerSpec(kind=<LayerKind.DYNAMIC_SLIDING: 2>, window=4096, max_cache_len=0, quant=None, num_sink_tokens=0, num_states=0, conv_kernel_size=0)
    """

    kind: LayerKind = LayerKind.DYNAMIC
    window: int = 0
    max_cache_len: int = 0
    quant: Optional[QuantOptions] = None
    num_sink_tokens: int = 0
    num_states: int = 0
    conv_kernel_size: int = 0


@dataclass(frozen=True)
class ModelConfig:
    """The parts of a model configuration that decide a cache's layers (``kvc_model_config``).

    Any object with these attribute names works where a config is expected, in
    particular a transformers ``PretrainedConfig`` (its decoder text config is used).
    """

    num_hidden_layers: int
    layer_types: Optional[Sequence[Union[str, LayerType]]] = None
    sliding_window: Optional[int] = None
    attention_chunk_size: Optional[int] = None
    num_kv_shared_layers: int = 0
    sliding_window_pattern: int = 0
    number_of_conv_states: int = 0
    conv_kernel: int = 0
    #: transformers >= 5.23: per layer, "reuse" makes the layer a dummy layer (it reads another layer's K/V);
    #: when given, num_kv_shared_layers drops no layer (transformers 5.23 ignores it)
    kv_sharing_modes: Optional[Sequence[str]] = None

    @classmethod
    def from_any(cls, config: Any = None, **overrides: Any) -> Optional["ModelConfig"]:
        """A ModelConfig from a transformers config, a ModelConfig, a mapping or None, with overrides."""
        values: dict = {}
        if config is not None:
            if hasattr(config, "get_text_config"):
                config = config.get_text_config(decoder=True)
            for f in fields(cls):
                if isinstance(config, Mapping):
                    if f.name in config:
                        values[f.name] = config[f.name]
                elif hasattr(config, f.name):
                    values[f.name] = getattr(config, f.name)
            if not isinstance(config, (Mapping, ModelConfig)):
                # transformers spellings of the same fields
                if "sliding_window_pattern" not in values and getattr(config, "_sliding_window_pattern", None):
                    values["sliding_window_pattern"] = config._sliding_window_pattern
        for k, v in overrides.items():
            if v is not None:
                values[k] = v
        if not values:
            return None
        if "num_hidden_layers" not in values:
            lt = values.get("layer_types")
            if lt is None:
                raise ValueError("a model config needs num_hidden_layers (or layer_types)")
            values["num_hidden_layers"] = len(lt)
        return cls(**values)

    def _to_lib(self) -> Tuple[Any, list]:
        """The SWIG struct, and the objects that must stay alive while it is used."""
        c = _lib.kvc_model_config()
        keep: list = []
        c.num_hidden_layers = _int(self.num_hidden_layers, "num_hidden_layers", 0, 2**32 - 1)
        types = self._types_with_sharing()
        if types is not None:
            arr = _lib.Int32Array(max(len(types), 1))
            for i, t in enumerate(types):
                if isinstance(t, str):
                    if t not in LAYER_TYPE_NAMES:
                        raise ValueError(f"layer_types[{i}] is {t!r}; kvcache knows {sorted(LAYER_TYPE_NAMES)}")
                    arr[i] = int(LAYER_TYPE_NAMES[t])
                else:
                    arr[i] = int(t)
            if len(types) != self.num_hidden_layers:
                raise ValueError(f"layer_types has {len(types)} entries but num_hidden_layers is "
                                 f"{self.num_hidden_layers}")
            c.layer_types = arr.cast()
            keep.append(arr)
        c.sliding_window = _opt_int(self.sliding_window)
        c.attention_chunk_size = _opt_int(self.attention_chunk_size)
        # kv_sharing_modes (5.23) supersedes num_kv_shared_layers, from which configs such as Gemma 4's derive it:
        # the shared layers are dummy layers then, not dropped ones (difference 18).
        c.num_kv_shared_layers = 0 if self.kv_sharing_modes is not None else _opt_int(self.num_kv_shared_layers)
        c.sliding_window_pattern = _opt_int(self.sliding_window_pattern)
        c.number_of_conv_states = _opt_int(self.number_of_conv_states)
        c.conv_kernel = _opt_int(self.conv_kernel)
        return c, keep

    def _types_with_sharing(self) -> Optional[list]:
        """layer_types with the layers kv_sharing_modes marks "reuse" made dummy (transformers 5.23's
        get_layer_types_and_kwargs); without layer_types they are first derived as kvcache derives them."""
        if self.kv_sharing_modes is None:
            return None if self.layer_types is None else list(self.layer_types)
        if self.layer_types is not None:
            types: list = list(self.layer_types)
        else:
            default = (LayerType.SLIDING_ATTENTION if _opt_int(self.sliding_window)
                       else LayerType.CHUNKED_ATTENTION if _opt_int(self.attention_chunk_size)
                       else LayerType.FULL_ATTENTION)
            types = [default] * operator.index(self.num_hidden_layers)
        # zip, as transformers does (lists of different lengths then fail the length check of _to_lib)
        return [LayerType.DUMMY if mode == "reuse" else t for t, mode in zip(types, self.kv_sharing_modes)]


@dataclass(frozen=True)
class LayerInfo:
    """What a layer is and holds (``kvc_layer_info``)."""

    kind: LayerKind
    window: int
    max_cache_len: int
    capacity: int
    is_initialized: bool
    is_sliding: bool
    is_chunked: bool
    is_compileable: bool
    records_past: bool
    dtype: Dtype
    batch_size: int
    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int
    seq_length: int
    stored_length: int
    is_linear: bool
    is_offloaded: bool
    has_previous_state: bool
    num_states: int
    conv_kernel_size: int
    num_sink_tokens: int
    quantized_length: int

    @classmethod
    def _from_lib(cls, i: Any) -> "LayerInfo":
        kw = {}
        for f in fields(cls):
            v = getattr(i, f.name)
            if f.type in ("bool",):
                v = bool(v)
            kw[f.name] = v
        kw["kind"] = LayerKind(kw["kind"]) if kw["kind"] in LayerKind._value2member_map_ else kw["kind"]
        kw["dtype"] = Dtype(kw["dtype"]) if kw["dtype"] in Dtype._value2member_map_ else kw["dtype"]
        return cls(**kw)


@dataclass(frozen=True)
class MemoryInfo:
    """Memory a cache holds (``kvc_memory_info``), in bytes."""

    bytes_reserved: int
    bytes_used: int
    bytes_device: int
    bytes_host: int
    bytes_quantized: int
    bytes_state: int

    @classmethod
    def _from_lib(cls, m: Any) -> "MemoryInfo":
        return cls(**{f.name: int(getattr(m, f.name)) for f in fields(cls)})
