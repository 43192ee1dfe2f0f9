"""Engines' own FlashInfer attention backends, run from their wheels under the fake.

The engine-shape tests (:mod:`tests.support.attention_shapes`) are written here after the
engines' code. This harness runs the engines' code itself: one module of a pinned engine
wheel (SGLang 0.5.23's ``srt/layers/attention/flashinfer_backend.py``, vLLM 0.33.0's
``v1/attention/backends/flashinfer.py``), read from the wheel and executed as that module,
with every ``flashinfer`` name it imports served by ``fi_compat.testing.fake_flashinfer``
and nothing else of FlashInfer supplied from outside the kit.

What the module imports from its own engine (``sglang.*``, ``vllm.*``: model runners,
memory pools, environment flags, Triton kernels) is not installed here, and is not what is
under test. :class:`EngineModule` serves each such module as a *stand-in* whose every
attribute is a :class:`Stub` (a class usable as a base class, a decorator, a generic, a
falsy value), except the attributes a test sets (``overrides``): the engine's runtime
context, its environment flags, the forward modes. The module's global ``torch`` is the
real torch behind :class:`CpuTorch`, which puts the tensors the engine asks for on
``"cuda"`` on the CPU and answers the one device query it makes.

Wheels are found as :mod:`tests.support.engine_wheels` says; the engine is never installed
or imported as a package.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import math
import mmap
import sys
import types
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from tests.support.engine_wheels import ENGINES, Engine, engine_wheel

__all__ = [
    "ENGINES",
    "CpuTorch",
    "Engine",
    "EngineModule",
    "Env",
    "Envs",
    "Stub",
    "engine_wheel",
    "integrated",
]


# ------------------------------------------------------------------------------ stand-ins


class _StubMeta(type):
    """The metaclass of a stand-in: every attribute, item and call is another stand-in."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not vars(cls).get("_stand_in", False):
            return super().__call__(*args, **kwargs)  # a class the engine derives from it
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: the function itself
        return _stub(f"{cls.__qualname__}()")

    def __bool__(cls) -> bool:
        return False

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __enter__(cls) -> Any:
        return cls

    def __exit__(cls, *exc: object) -> None:
        return None


class Stub(metaclass=_StubMeta):
    """What an engine module gets for a name of its engine that no test set: usable as a
    base class, a decorator, a generic (``Base[T]``), a context manager and a falsy value."""

    _stand_in = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _stub(name: str) -> Any:
    return _StubMeta(name, (Stub,), {"_stand_in": True, "__qualname__": name})


class _StubModule(types.ModuleType):
    def __init__(self, name: str, overrides: Mapping[str, Any]) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in self._overrides:
            return self._overrides[name]
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def __init__(self, overrides: Mapping[str, Any]) -> None:
        self.overrides = overrides

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name, self.overrides)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _WheelLoader(importlib.abc.Loader):
    """Runs one more of the engine's own modules from its wheel, as it is (its imports
    served as the module under test's are), then sets the attributes a test overrides."""

    def __init__(
        self, code: types.CodeType, overrides: Mapping[str, Any], cpu: types.ModuleType
    ) -> None:
        self.code = code
        self.overrides = overrides
        self.cpu = cpu

    def exec_module(self, module: types.ModuleType) -> None:
        module.__file__ = self.code.co_filename
        previous = sys.modules.get("torch")
        sys.modules["torch"] = self.cpu
        try:
            exec(self.code, module.__dict__)
        finally:
            sys.modules["torch"] = previous if previous is not None else torch
        for name, value in self.overrides.items():
            setattr(module, name, value)


class _StubFinder(importlib.abc.MetaPathFinder):
    """Serves the engine's own modules (but the one under test and those run from the
    wheel, ``real``) as stand-ins."""

    def __init__(
        self,
        engine: Engine,
        overrides: Mapping[str, Mapping[str, Any]],
        real: Mapping[str, types.CodeType] | None = None,
        cpu: types.ModuleType | None = None,
    ) -> None:
        self.engine = engine
        self.overrides = overrides
        self.real = real or {}
        self.cpu = cpu

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        root = self.engine.root
        if fullname != root and not fullname.startswith(root + "."):
            return None
        overrides = self.overrides.get(fullname, {})
        code = self.real.get(fullname)
        if code is not None and self.cpu is not None:
            return importlib.machinery.ModuleSpec(
                fullname, _WheelLoader(code, overrides, self.cpu), origin=code.co_filename
            )
        loader = _StubLoader(overrides)
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)


# ------------------------------------------------------------------------------ torch


class _Cuda:
    """``torch.cuda`` as the engine's planning code asks it, on a CPU machine."""

    def __init__(self, sm_count: int) -> None:
        self.sm_count = sm_count

    def get_device_properties(self, device: Any = None) -> Any:
        return types.SimpleNamespace(multi_processor_count=self.sm_count, name="stand-in GPU")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class CpuTorch(types.ModuleType):
    """The real torch, with the tensors asked for on ``"cuda"`` made on the CPU."""

    _FACTORIES = frozenset(
        {"empty", "zeros", "ones", "full", "arange", "tensor", "empty_like", "zeros_like"}
    )

    def __init__(self, sm_count: int = 132) -> None:
        super().__init__("torch")
        self.cuda = _Cuda(sm_count)

    def __getattr__(self, name: str) -> Any:
        found = getattr(torch, name)
        if name not in self._FACTORIES:
            return found

        def on_cpu(*args: Any, **kwargs: Any) -> Any:
            device = kwargs.get("device")
            if device is not None and torch.device(device).type == "cuda":
                kwargs["device"] = "cpu"
            if name == "zeros" and torch.device(kwargs.get("device") or "cpu").type == "cpu":
                return _zeros(found, args, kwargs)
            return found(*args, **kwargs)

        return on_cpu


#: Zeroed tensors from this many bytes up are given memory the kernel zeroes on first touch.
LAZY_ZEROS_BYTES = 1 << 20


def _zeros(zeros: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.zeros(*args, **kwargs)`` on the CPU. An engine's workspace buffers are read
    by no kernel here, and can be large (vLLM's FlashInfer backend asks for 2 GiB under
    batch invariance): ``torch.zeros`` writes every byte (0.38 s for that one, most of what
    building the backend took), where an anonymous mapping is zeros already and costs
    nothing until written. The same shape, dtype and values either way."""
    shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    plain = set(kwargs) <= {"dtype", "device"} and all(type(n) is int for n in shape)
    size = math.prod(shape) * dtype.itemsize if plain else 0
    if size < LAZY_ZEROS_BYTES:
        return zeros(*args, **kwargs)
    return torch.frombuffer(mmap.mmap(-1, size), dtype=dtype).view(tuple(shape))


# ------------------------------------------------------------------------------ the module


@functools.cache
def _compiled(wheel: Path, member: str) -> types.CodeType:
    """The engine module's code, read from the wheel and compiled once per process."""
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(member).decode("utf-8")
    return compile(source, f"{wheel.name}/{member}", "exec", dont_inherit=True)


class EngineModule:
    """One engine module executed from its wheel, its engine's other modules stand-ins.

    Use it as a context manager, inside ``fake_flashinfer(...)``: on entry the module is
    executed (its ``flashinfer`` imports served by the fake) and returned; the stand-ins
    stay in place until exit, for the imports the engine makes inside its functions.
    """

    def __init__(
        self,
        engine: Engine,
        wheel: Path,
        overrides: Mapping[str, Mapping[str, Any]],
        *,
        globals_: Mapping[str, Any] | None = None,
        torch_module: types.ModuleType | None = None,
        real: Sequence[str] = (),
    ) -> None:
        self.engine = engine
        self.filename = f"{wheel.name}/{engine.member}"
        self.code = _compiled(wheel, engine.member)
        #: More of the engine's modules run from the wheel as they are, by dotted name
        #: (``vllm.utils.flashinfer``); the rest are stand-ins.
        self.real = {name: _compiled(wheel, name.replace(".", "/") + ".py") for name in real}
        self.overrides = overrides
        self.globals = dict(globals_ or {})
        self.torch = torch_module if torch_module is not None else CpuTorch()
        self._finder: _StubFinder | None = None
        self._saved: dict[str, types.ModuleType] = {}

    def __enter__(self) -> types.ModuleType:
        root = self.engine.root
        self._saved = {
            n: m for n, m in sys.modules.items() if n == root or n.startswith(root + ".")
        }
        for name in self._saved:
            del sys.modules[name]
        self._finder = _StubFinder(self.engine, self.overrides, self.real, self.torch)
        sys.meta_path.insert(0, self._finder)
        module = types.ModuleType(self.engine.module)
        module.__file__ = self.filename
        sys.modules[self.engine.module] = module
        try:
            code = self.code
            previous = sys.modules.get("torch")
            # The module's `import torch` binds the CPU view; torch itself stays in place.
            sys.modules["torch"] = self.torch
            try:
                exec(code, module.__dict__)
            finally:
                sys.modules["torch"] = previous if previous is not None else torch
            for name, value in self.globals.items():
                setattr(module, name, value)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return module

    def __exit__(self, *exc: object) -> None:
        root = self.engine.root
        if self._finder is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._finder)
            self._finder = None
        for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
            del sys.modules[name]
        sys.modules.update(self._saved)


class Env:
    """One of an engine's environment flags (``envs.X.get()`` / ``.set(value)``)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value

    def set(self, value: Any) -> None:
        self.value = value


class Envs:
    """An engine's ``envs`` namespace: the flags given, every other one unset (None)."""

    def __init__(self, **values: Any) -> None:
        self._flags = {name: Env(value) for name, value in values.items()}

    def __getattr__(self, name: str) -> Env:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._flags.setdefault(name, Env(None))


class _Integrated(type):
    """The metaclass of an integrated wrapper class (:func:`integrated`): calling it builds
    the FlashInfer wrapper and hands it to ``deterministic_wrapper``; ``isinstance`` answers
    as for the FlashInfer class, as engine code that checks its wrappers expects."""

    _fi_class: type
    _fi_build: Callable[..., Any]

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._fi_build(cls._fi_class, *args, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls._fi_class)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls._fi_class)


def integrated(cls: type, build: Callable[..., Any]) -> type:
    """A stand-in for the FlashInfer wrapper class ``cls`` in an engine module, for the
    integration a migration guide describes: ``build(cls, *args, **kwargs)`` makes each
    wrapper (with the engine's arguments, changed where the guide says) and wraps it."""
    return _Integrated(cls.__name__, (), {"_fi_class": cls, "_fi_build": staticmethod(build)})
