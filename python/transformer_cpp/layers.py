"""The layers of the Transformer, one class each: the bound C++ classes.

Each layer class is the C++ class bound for its dtype (``float32``, the default, or ``float64``,
chosen by ``dtype=``): its signature, docstring, properties and errors are the binding's, and
:class:`Layer` adds what every layer has in Python (the dtype choice, ``repr``, calling the layer
as ``layer(x)``). A layer class body holds only what is Python (masks of any broadcastable shape
turned into the core's form, leading axes folded). Every layer has the same surface:

* ``forward(x, ...)`` — NumPy in, NumPy out (a copy; the layer keeps what backward needs);
* ``backward(dout)`` — returns the gradient of the input(s) and *accumulates* parameter gradients;
* ``parameters()`` — an ordered dict ``name -> Parameter`` whose ``.value`` and ``.grad`` are
  writable NumPy views of the C++ memory (writing ``.value[...]`` changes the layer);
* ``zero_grad()`` — the only thing that clears parameter gradients.

A layer with dropout (``Dropout``, ``FeedForward``, the encoder and decoder layers and stacks, like
``Transformer.forward``) takes ``training=False`` by default: a forward pass is inference
(deterministic, no dropout) unless ``training=True`` asks for the training one.

``float32`` is what models train with; ``float64`` exists so that tests can check every backward
pass against finite differences. The functions (softmax, loss, masks) are in
:mod:`transformer_cpp.functional`, the optimiser in :mod:`transformer_cpp.optim`.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Dict, List, Set, Tuple, cast

import numpy as np

from . import _core, _signatures
from ._checks import blocked as _blocked
from .functional import attention_inputs, linear_attention_inputs

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LSHAttention",
    "LSHSelfAttention",
    "Layer",
    "LayerNorm",
    "Linear",
    "LinearAttention",
    "LinearMultiHeadAttention",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "ReLU",
    "RelativeMultiHeadAttention",
    "ReversibleStack",
    "ScaledDotProductAttention",
    "SoftmaxSelfAttention",
    "TiledAttention",
]


def core_class(name: str, dtype: Any = "float32") -> Any:
    """The ``_core`` class ``name`` for ``dtype`` (``"float32"`` or ``"float64"``)."""
    return getattr(_core, f"{name}_{_dtype_name(name, dtype)}")


def _dtype_name(who: str, dtype: Any) -> str:
    try:
        dt = np.dtype(dtype).name
    except TypeError as exc:
        raise ValueError(f"{who}: dtype must be 'float32' or 'float64', got {dtype!r}") from exc
    if dt not in ("float32", "float64"):
        raise ValueError(f"{who}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return str(dt)


def _documented(cls: type, name: str, method: Any) -> Any:
    """The class-level face of a bound method: a function with its signature and docstring (what
    ``inspect.signature``, ``help`` and the API reference read) that calls the bound method of the
    instance's dtype."""
    sig = _signatures.parse(name, method.__doc__, method=True)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(super(cls, self), name)(*args, **kwargs)

    call.__name__, call.__qualname__, call.__module__ = name, f"{cls.__qualname__}.{name}", cls.__module__
    call.__doc__ = sig.doc or None
    setattr(call, "__signature__", sig.to_inspect())
    return call


class Layer:
    """Base of every layer: ``forward``, ``backward``, ``parameters``, ``zero_grad``.

    A layer class names its bound C++ class (``class Linear(Layer, core="Linear")``); calling it
    with ``dtype="float32"`` (the default) or ``"float64"`` makes an instance of that dtype's bound
    class, so the methods, properties, docstrings and errors are the binding's own. The class body
    holds only what is Python: input normalisation (masks, leading axes) before the C++ call.
    """

    _bound = ""  # the name of the bound class, without its dtype
    _pair: Dict[str, type] = {}  # dtype name -> the class of that dtype (on each layer class)
    _faces: Set[str] = set()  # the members a layer class shows for its bound class (not Python's)
    _dtype: str = ""  # on the class of one dtype
    _given: Tuple[Tuple[Any, ...], Dict[str, Any]] = ((), {})  # the constructor's arguments, for repr

    if TYPE_CHECKING:  # the members come from the bound class of the instance's dtype

        def __getattr__(self, name: str) -> Any: ...

        def forward(self, *args: Any, **kwargs: Any) -> Any: ...

        def backward(self, *args: Any, **kwargs: Any) -> Any: ...

        def state(self, *args: Any, **kwargs: Any) -> Any: ...

    def __init_subclass__(cls, core: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_dtype" in vars(cls):
            return  # the class of one dtype, made below
        core = core or cls._bound  # a subclass of a layer class has its bound class
        if not core:
            return
        cls._bound = core
        # what Python defines, in this class or the layer classes it derives from
        own = {n for c in cls.__mro__[:-2] for n in vars(c) if n not in getattr(c, "_faces", ())}
        first = getattr(_core, f"{core}_float32")
        if cls.__doc__ is None:
            cls.__doc__ = first.__doc__
        cls._faces = set()
        for name, member in vars(first).items():
            if name in own or name.startswith("_"):
                continue
            cls._faces.add(name)
            if isinstance(member, property):
                setattr(cls, name, member)  # read from the class of the instance's dtype below
            elif callable(member):
                setattr(cls, name, _documented(cls, name, member))
        for name, member in vars(cls).items():  # a Python override documented by the binding
            bound = vars(first).get(name)
            if callable(member) and getattr(member, "__doc__", "") is None and bound is not None:
                member.__doc__ = _signatures.parse(name, bound.__doc__, method=True).doc or None
        if "__init__" not in own:  # the binding's arguments and dtype
            cls._faces.add("__init__")
            init = _signatures.parse("__init__", first.__init__.__doc__, method=True).to_inspect()
            dtype = inspect.Parameter("dtype", inspect.Parameter.KEYWORD_ONLY, default="float32")

            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                Layer.__init__(self, *args, **kwargs)

            __init__.__qualname__, __init__.__module__ = f"{cls.__qualname__}.__init__", cls.__module__
            setattr(__init__, "__signature__", init.replace(parameters=[*init.parameters.values(), dtype]))
            setattr(cls, "__init__", __init__)
        cls._pair = {}
        for dt in ("float32", "float64"):
            bound_cls = getattr(_core, f"{core}_{dt}")
            # the bound members themselves on the class of each dtype: no Python call in between
            members = {n: m for n, m in vars(bound_cls).items() if not n.startswith("_") and n not in own}
            attrs = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
            cls._pair[dt] = type(cls.__name__, (cls, bound_cls), {**attrs, **members, "_dtype": dt})

    def __new__(cls, *args: Any, dtype: Any = "float32", **kwargs: Any) -> Any:
        pair = vars(cls).get("_pair")
        target: Any = pair[_dtype_name(cls.__name__, dtype)] if pair else cls
        return super(Layer, target).__new__(target)

    def __init__(self, *args: Any, dtype: Any = "float32", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given = (args, kwargs)

    @property
    def dtype(self) -> np.dtype:
        """``float32`` or ``float64``: the build of the C++ layer."""
        return np.dtype(type(self)._dtype)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __repr__(self) -> str:
        args, kwargs = self._given
        shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()] + [f"dtype={self.dtype.name!r}"]
        return f"{type(self).__name__}({', '.join(shown)})"


class CoreObject:
    """A Python object over one ``_core`` object: attributes it does not define itself are read
    from and written to the C++ object (so ``adam.step_count = 0`` reaches the core)."""

    _core: Any

    def __init__(self, core: Any) -> None:
        object.__setattr__(self, "_core", core)

    def __getattr__(self, name: str) -> Any:  # only called when normal lookup fails
        if name.startswith("__") or name == "_core":
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_core"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and not hasattr(type(self), name) and hasattr(type(self._core), name):
            setattr(self._core, name, value)
        else:
            object.__setattr__(self, name, value)

    @property
    def dtype(self) -> np.dtype:
        """``float32`` or ``float64``: the build of the core object underneath."""
        return np.dtype("float64" if type(self._core).__name__.endswith("_float64") else "float32")

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(self._core) if not n.startswith("_")})


# --- dense layers, embeddings --------------------------------------------------------------------


class Linear(Layer, core="Linear"):
    pass


class Dropout(Layer, core="Dropout"):
    pass


class ReLU(Layer, core="ReLU"):
    pass


class LayerNorm(Layer, core="LayerNorm"):
    pass


class FeedForward(Layer, core="FeedForward"):
    pass


class Embedding(Layer, core="Embedding"):
    pass


class PositionalEmbedding(Layer, core="PositionalEmbedding"):
    pass


# --- attention -----------------------------------------------------------------------------------


def _as_mask(mask: Any, batch: int, tq: int, tk: int, who: str) -> Any:
    """Normalise a user mask to the contiguous ``(B, Tq, Tk)`` uint8 array the core expects."""
    if mask is None:
        return None
    m = _blocked(who, "mask", mask)
    if m.ndim == 4:  # (B, 1, Tq, Tk) or (B, 1, 1, Tk) as in the tutorials
        if m.shape[1] != 1:
            raise ValueError(f"{who}: a 4-D mask must have shape (B, 1, Tq, Tk) to broadcast over heads, got {m.shape}")
        m = m[:, 0]
    if m.ndim not in (2, 3):
        raise ValueError(f"{who}: mask must broadcast to (B, Tq, Tk) = ({batch}, {tq}, {tk}), got shape {m.shape}")
    _core._check_memory(who, f"a ({batch}, {tq}, {tk}) mask", 2.0 * float(batch) * float(tq) * float(tk))
    try:
        m = np.broadcast_to(m, (batch, tq, tk))
    except ValueError:
        raise ValueError(
            f"{who}: mask of shape {np.shape(mask)} does not broadcast to (B, Tq, Tk) = ({batch}, {tq}, {tk})"
        ) from None
    return np.ascontiguousarray(m, dtype=np.uint8)


def _padding(who: str, name: str, padding: Any) -> Any:
    """A key-padding mask (True or 1 = blocked) as the contiguous uint8 array the core reads (None stays None)."""
    return None if padding is None else np.ascontiguousarray(_blocked(who, name, padding), np.uint8)


def _btc_shape(x: Any, who: str, name: str) -> Tuple[int, ...]:
    shape = np.shape(x)
    if len(shape) != 3:
        raise ValueError(f"{who}: {name} must have shape (batch, length, d_model), got {shape}")
    return cast(Tuple[int, ...], shape)


def _unfold(lead: Tuple[int, ...], *arrays: np.ndarray) -> Tuple[np.ndarray, ...]:
    """Arrays of shape (G, ...) back to (*lead, ...), the leading axes that forward folded into G."""
    return tuple(a.reshape(lead + a.shape[1:]) for a in arrays)


def _fold(lead: Tuple[int, ...], dout: Any) -> np.ndarray:
    """``dout`` of shape (*lead, ...) as (G, ...), the way forward folded its inputs."""
    d = np.asarray(dout)
    return d.reshape((int(np.prod(lead)) if lead else 1,) + d.shape[len(lead) :])


class ScaledDotProductAttention(Layer, core="ScaledDotProductAttention"):
    _lead: Tuple[int, ...] = ()

    def forward(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any = None) -> Tuple[np.ndarray, ...]:
        q3, k3, v3, m, lead = attention_inputs(q, k, v, mask, "scaled_dot_product_attention")
        out = super().forward(q3, k3, v3, m)
        self._lead = lead
        return _unfold(lead, *out)

    def backward(self, dout: np.ndarray) -> Tuple[np.ndarray, ...]:
        return _unfold(self._lead, *super().backward(_fold(self._lead, dout)))


class MultiHeadAttention(Layer, core="MultiHeadAttention"):
    def __init__(
        self, d_model: int, n_heads: int, *, seed: int = 0, attention_impl: str = "plain", dtype: Any = "float32"
    ) -> None:
        super().__init__(d_model, n_heads, seed=seed, dtype=dtype)
        self.attention_impl = attention_impl

    def forward(self, x: np.ndarray, memory: Any = None, mask: Any = None) -> np.ndarray:
        """``x`` (B, T, d_model), ``memory`` None or (B, S, d_model); ``mask`` broadcasts to
        (B, Tq, Tk) (also (B, 1, Tq, Tk)), True = blocked."""
        who = "MultiHeadAttention.forward"
        b, tq, _ = _btc_shape(x, who, "x")
        tk = tq if memory is None else _btc_shape(memory, who, "memory")[1]
        return cast(np.ndarray, super().forward(x, memory, _as_mask(mask, b, tq, tk, who)))


class RelativeMultiHeadAttention(Layer, core="RelativeMultiHeadAttention"):
    pass


class LinearAttention(Layer, core="LinearAttention"):
    _lead: Tuple[int, ...] = ()

    def forward(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
        """``q``, ``k``, ``v`` of one shape (..., T, d) -> the output of that shape."""
        q3, k3, v3, lead = linear_attention_inputs(q, k, v, causal, "linear_attention")
        out = super().forward(q3, k3, v3, bool(causal))
        self._lead = lead
        return _unfold(lead, out)[0]

    def backward(self, dout: np.ndarray) -> Tuple[np.ndarray, ...]:
        """``dout`` (..., T, d) -> ``(dq, dk, dv)``."""
        return _unfold(self._lead, *super().backward(_fold(self._lead, dout)))

    def state(self) -> Tuple[np.ndarray, ...]:
        """``(S, z)`` of the last forward: ``S`` (..., d, d) and ``z`` (..., d)."""
        return _unfold(self._lead, *super().state())


class LinearMultiHeadAttention(Layer, core="LinearMultiHeadAttention"):
    def forward(self, x: np.ndarray, causal: bool = False) -> np.ndarray:
        """``x`` (B, T, d_model) -> (B, T, d_model); ``causal`` True, False or a NumPy bool."""
        return cast(np.ndarray, super().forward(x, bool(causal) if isinstance(causal, np.bool_) else causal))


class LSHAttention(Layer, core="LSHAttention"):
    pass


class LSHSelfAttention(Layer, core="LSHSelfAttention"):
    pass


class SoftmaxSelfAttention(Layer, core="SoftmaxSelfAttention"):
    pass


class TiledAttention(Layer, core="TiledAttention"):
    def forward(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, key_padding: Any = None
    ) -> np.ndarray:
        """``q`` (B, H, Tq, d), ``k`` and ``v`` (B, H, Tk, d), ``key_padding`` (B, Tk) with True (or 1)
        = blocked -> (B, H, Tq, d)."""
        padding = _padding("TiledAttention.forward", "key_padding", key_padding)
        return cast(np.ndarray, super().forward(q, k, v, causal, padding))


class EncoderLayer(Layer, core="EncoderLayer"):
    def forward(self, x: np.ndarray, mask: Any = None, training: bool = False) -> np.ndarray:
        """``x`` (B, T, d_model); ``mask`` broadcasts to (B, T, T) (also (B, 1, T, T)), True = blocked."""
        who = "EncoderLayer.forward"
        b, t, _ = _btc_shape(x, who, "x")
        return cast(np.ndarray, super().forward(x, _as_mask(mask, b, t, t, who), training))


class DecoderLayer(Layer, core="DecoderLayer"):
    def forward(
        self, x: np.ndarray, memory: np.ndarray, self_mask: Any = None, cross_mask: Any = None, training: bool = False
    ) -> np.ndarray:
        """``x`` (B, T, d_model), ``memory`` (B, S, d_model); ``self_mask`` broadcasts to (B, T, T),
        ``cross_mask`` to (B, T, S) (also with a head axis of 1), True = blocked."""
        who = "DecoderLayer.forward"
        b, t, _ = _btc_shape(x, who, "x")
        s = _btc_shape(memory, who, "memory")[1]
        self_m, cross_m = _as_mask(self_mask, b, t, t, who), _as_mask(cross_mask, b, t, s, who)
        return cast(np.ndarray, super().forward(x, memory, self_m, cross_m, training))


# --- stacks --------------------------------------------------------------------------------------


class Encoder(Layer, core="Encoder"):
    pass


class Decoder(Layer, core="Decoder"):
    def forward(
        self, tokens: Any, memory: np.ndarray, source_padding: Any = None, training: bool = False
    ) -> np.ndarray:
        """``tokens`` (B, T), ``memory`` (B, S, d_model), ``source_padding`` (B, S) with True (or 1)
        = a padding key -> (B, T, d_model)."""
        padding = _padding("Decoder.forward", "source_padding", source_padding)
        return cast(np.ndarray, super().forward(tokens, memory, padding, training))


class ReversibleStack(Layer, core="ReversibleStack"):
    pass
