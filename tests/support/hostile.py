"""Generated hostile ``flashinfer`` packages, shared by the probe's and the CLI's tests.

Every package in :data:`HOSTILE_PACKAGES` is generated from the tables below (every
built-in exception raised from ``flashinfer/__init__.py`` and from
``flashinfer/comm/__init__.py``, exceptions that cannot be printed, import-time output,
lazy ``__getattr__`` hooks, broken ``__path__`` and ``__version__``, hostile wrapper
classes, ``TorchDistBackend.bcast`` variants). Each carries the exact set of items the
probe must answer ``supported``; everything else must come out ``unsupported`` or
``unknown``.
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fi_compat.capabilities import ATTENTION_PROBES, COMM_PROBES, Capabilities, Status
from tests.support import fakes

Item = tuple[str, str, str]

COMM_ITEMS: frozenset[Item] = frozenset(
    ("comm", owner, keyword) for owner, keywords in COMM_PROBES.items() for keyword in keywords
)
ATTENTION_ITEMS: frozenset[Item] = frozenset(
    ("attention", owner, keyword)
    for owner, keywords in ATTENTION_PROBES.items()
    for keyword in keywords
)
BCAST: Item = ("bcast", "bcast_root_is_group_local", "")
#: Everything :func:`fakes.package` supports by default (it has no TorchDistBackend).
FULL = COMM_ITEMS | ATTENTION_ITEMS
NOTHING: frozenset[Item] = frozenset()
GROUP: Item = ("comm", "create_allreduce_fusion_workspace", "group")


def process_env(root: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``fi-compat`` subprocess that imports the package under ``root``.

    Importing torch takes seconds, and torch is not what these tests are about, so a stub
    that fails to import stands in for it (the report says "not loaded").
    """
    blocker = root.parent / "no-torch"
    (blocker / "torch").mkdir(parents=True, exist_ok=True)
    (blocker / "torch" / "__init__.py").write_text('raise ImportError("torch blocked")\n')
    path = os.pathsep.join([str(root), str(blocker), *sys.path])
    return {**os.environ, "PYTHONPATH": path, **extra}


def decode_items() -> frozenset[Item]:
    return frozenset(item for item in ATTENTION_ITEMS if item[1].startswith("BatchDecode"))


def statuses(caps: Capabilities) -> dict[Item, Status]:
    found = {
        ("comm", owner, keyword): support.status
        for owner, answers in caps.comm.kwargs.items()
        for keyword, support in answers.items()
    }
    found.update(
        {
            ("attention", owner, keyword): support.status
            for owner, answers in caps.attention.items()
            for keyword, support in answers.items()
        }
    )
    found[BCAST] = caps.comm.bcast_root_is_group_local.status
    return found


@dataclass(frozen=True)
class Hostile:
    """One generated hostile package and the items the probe must answer ``supported``."""

    id: str
    files: Mapping[str, str]
    supported: frozenset[Item]


# ------------------------------------------------------------------ exceptions to raise

#: Constructor arguments for the built-in exceptions that do not take one message.
SPECIAL_ARGS: Mapping[str, str] = {
    "UnicodeDecodeError": '"utf-8", b"\\xff", 0, 1, "invalid start byte"',
    "UnicodeEncodeError": '"ascii", "\\xe9", 0, 1, "ordinal not in range(128)"',
    "UnicodeTranslateError": '"\\xe9", 0, 1, "cannot translate"',
    "BaseExceptionGroup": '"several", [ValueError("inner")]',
    "ExceptionGroup": '"several", [ValueError("inner")]',
}


def builtin_exceptions() -> list[type[BaseException]]:
    """Every public built-in exception class except ``KeyboardInterrupt``."""
    found: dict[str, type[BaseException]] = {}
    pending: list[type[BaseException]] = [BaseException]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if (
            cls.__module__ == "builtins"
            and not cls.__name__.startswith("_")
            and getattr(builtins, cls.__name__, None) is cls
            and cls is not KeyboardInterrupt
        ):
            found[cls.__name__] = cls
    return [found[name] for name in sorted(found)]


BUILTIN_EXCEPTIONS = builtin_exceptions()

#: Classes the raising modules define first (``prelude``), for the raises below.
EXCEPTION_PRELUDE = """
class HostileBase(BaseException):
    pass

class StrRaises(ValueError):
    def __str__(self):
        raise RuntimeError("__str__ refuses")

class StrNotStr(ValueError):
    def __str__(self):
        return 42

class NothingPrints(ValueError):
    def __str__(self):
        raise SystemExit(5)
    def __repr__(self):
        raise SystemExit(6)

class HostileStr(str):
    def __str__(self):
        raise RuntimeError("HostileStr.__str__")
    def __format__(self, spec):
        raise RuntimeError("HostileStr.__format__")
    def __repr__(self):
        raise RuntimeError("HostileStr.__repr__")

class StrIsHostileStr(ValueError):
    def __str__(self):
        return HostileStr("a str subclass whose methods raise")

class NameRaisesMeta(type):
    @property
    def __name__(cls):
        raise RuntimeError("no __name__ for you")

class Nameless(ValueError, metaclass=NameRaisesMeta):
    pass
"""

#: ``raise`` expressions beyond the built-in classes: (id, expression).
EXTRA_RAISES: tuple[tuple[str, str], ...] = (
    ("SystemExit-0", "SystemExit(0)"),
    ("SystemExit-3", "SystemExit(3)"),
    ("SystemExit-msg", 'SystemExit("flashinfer says goodbye")'),
    ("custom-BaseException", 'HostileBase("not an Exception")'),
    ("str-raises", 'StrRaises("secret")'),
    ("str-not-str", "StrNotStr()"),
    ("nothing-prints", "NothingPrints()"),
    ("str-is-hostile-str", "StrIsHostileStr()"),
    ("nameless", 'Nameless("who am I")'),
    ("non-ascii", 'RuntimeError("caf\\u00e9 \\u2615 \\ud800")'),
)


def raise_expressions() -> list[tuple[str, str]]:
    plain = [
        (cls.__name__, f"{cls.__name__}({SPECIAL_ARGS.get(cls.__name__, repr('hostile'))})")
        for cls in BUILTIN_EXCEPTIONS
    ]
    return plain + list(EXTRA_RAISES)


RAISES = raise_expressions()


def raising_packages() -> list[Hostile]:
    out = []
    for name, expression in RAISES:
        out.append(
            Hostile(
                f"init-raises-{name}",
                fakes.package(init_raises=expression, prelude=EXCEPTION_PRELUDE),
                NOTHING,
            )
        )
        out.append(
            Hostile(
                f"comm-raises-{name}",
                fakes.package(comm_raises=expression, prelude=EXCEPTION_PRELUDE),
                ATTENTION_ITEMS,  # the wrappers live in flashinfer itself
            )
        )
    return out


# ------------------------------------------------------------------ other hostility

NOISE: tuple[tuple[str, str], ...] = (
    ("print", 'print("flashinfer: hello from import")\n'),
    ("sys-stdout-write", 'import sys\nsys.stdout.write("{not json\\n")\n'),
    ("os-write-fd1", 'import os\nos.write(1, b"{written to fd 1\\n")\n'),
    ("c-printf", 'import ctypes\nctypes.CDLL(None).printf(b"{C printf\\n")\n'),
)


def noise_packages() -> list[Hostile]:
    out = []
    for name, source in NOISE:
        out.append(Hostile(f"noise-init-{name}", fakes.package(extra=source), FULL))
        files = fakes.package()
        files["flashinfer/comm/__init__.py"] = source + fakes.NEW_COMM
        out.append(Hostile(f"noise-comm-{name}", files, FULL))
    return out


#: Module-level ``__getattr__`` bodies for names the module lacks: (id, statement).
GETATTR_HOOKS: tuple[tuple[str, str], ...] = (
    ("AttributeError", 'raise AttributeError(f"no {name}")'),
    ("ModuleNotFoundError", 'raise ModuleNotFoundError(f"lazy import of {name} failed")'),
    ("RuntimeError", 'raise RuntimeError(f"cannot load {name}")'),
    ("SystemExit", "raise SystemExit(f'{name}')"),
)


#: Only the decode wrapper, declaring the split settings itself.
DECODE_ONLY = """
class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_tensor_cores=False):
        pass
    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, fixed_split_size=None, disable_split_kv=False):
        pass
"""


def getattr_packages() -> list[Hostile]:
    out = []
    for name, statement in GETATTR_HOOKS:
        hook = f"\ndef __getattr__(name):\n    {statement}\n"
        # flashinfer lacks two wrappers: the hook decides what reading them does.
        out.append(
            Hostile(
                f"getattr-flashinfer-{name}",
                fakes.package(wrappers=DECODE_ONLY, extra=hook),
                COMM_ITEMS | decode_items(),
            )
        )
        # flashinfer.comm lacks the unified API.
        legacy = fakes.package(comm=fakes.LEGACY_COMM + hook)
        out.append(
            Hostile(
                f"getattr-comm-{name}",
                legacy,
                ATTENTION_ITEMS
                | {
                    ("comm", "trtllm_create_ipc_workspace_for_all_reduce_fusion", "group"),
                    ("comm", "trtllm_allreduce_fusion", "trigger_completion_at_end"),
                },
            )
        )
    return out


PATHS: tuple[tuple[str, str], ...] = (
    ("int", "__path__ = 5\n"),
    ("none", "__path__ = None\n"),
    (
        "iter-raises",
        "class _P:\n    def __iter__(self):\n        raise SystemExit(7)\n__path__ = _P()\n",
    ),
    ("non-str-entries", "__path__ = [5, b'bytes']\n"),
)

VERSIONS: tuple[tuple[str, str], ...] = (
    ("int", "__version__ = 5\n"),
    ("unparsable", '__version__ = "not a version at all"\n'),
    ("huge-release", '__version__ = "1" * 5000\n'),
    ("nul", '__version__ = "0.7.2\\x00"\n'),
    ("non-ascii", '__version__ = "0.7.2-\\u00e9\\ud800"\n'),
    (
        "hostile-str",
        EXCEPTION_PRELUDE + '__version__ = HostileStr("0.7.2")\n',
    ),
    (
        "getattr-raises",
        "del __version__\ndef __getattr__(name):\n    raise RuntimeError(name)\n",
    ),
)


def module_attribute_packages() -> list[Hostile]:
    out = [
        Hostile(f"path-{name}", fakes.package(extra=src), ATTENTION_ITEMS) for name, src in PATHS
    ]
    out += [Hostile(f"version-{name}", fakes.package(extra=src), FULL) for name, src in VERSIONS]
    out.append(
        Hostile(
            "sys-modules-None",
            fakes.package(extra="import sys\nsys.modules[__name__] = None\n"),
            NOTHING,
        )
    )
    out.append(
        Hostile(
            "sys-modules-object",
            fakes.package(extra="import sys\nsys.modules[__name__] = object()\n"),
            NOTHING,
        )
    )
    return out


DECODE = "BatchDecodeWithPagedKVCacheWrapper"
DECODE_PLAN = """
    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, fixed_split_size=None, disable_split_kv=False):
        pass
"""

#: Replacements for the decode wrapper: (id, source, whether its plan answers stand).
WRAPPERS: tuple[tuple[str, str, bool], ...] = (
    (
        "metaclass-instancecheck-raises",
        "class _Meta(type):\n    def __instancecheck__(cls, obj):\n"
        "        raise RuntimeError('instancecheck')\n"
        f"class {DECODE}(metaclass=_Meta):{DECODE_PLAN}",
        True,
    ),
    (
        "metaclass-getattribute-raises",
        "class _Meta(type):\n    def __getattribute__(cls, name):\n"
        "        raise SystemExit('getattribute ' + name)\n"
        f"class {DECODE}(metaclass=_Meta):{DECODE_PLAN}",
        True,
    ),
    (
        "plan-property-raises",
        f"class {DECODE}:\n    @property\n    def plan(self):\n        raise SystemExit(9)\n",
        False,
    ),
    (
        "plan-signature-raises-SystemExit",
        "class _NoSig:\n    @property\n    def __signature__(self):\n"
        "        raise SystemExit('no signature')\n"
        "    def __call__(self, *args, **kwargs):\n        return None\n"
        f"class {DECODE}:\n    plan = _NoSig()\n",
        False,
    ),
    (
        "plan-signature-raises-BaseException",
        "class _Boom(BaseException):\n    pass\n"
        "class _NoSig:\n    @property\n    def __signature__(self):\n"
        "        raise _Boom('no signature')\n"
        "    def __call__(self, *args, **kwargs):\n        return None\n"
        f"class {DECODE}:\n    plan = _NoSig()\n",
        False,
    ),
    (
        "not-a-class-class-attribute-raises",
        "class _Weird:\n    @property\n    def __class__(self):\n"
        "        raise RuntimeError('__class__')\n"
        f"{DECODE} = _Weird()\n",
        False,
    ),
    ("plan-is-none", f"class {DECODE}:\n    plan = None\n", False),
)


def wrapper_packages() -> list[Hostile]:
    out = []
    for name, source, stands in WRAPPERS:
        supported = FULL if stands else FULL - decode_items()
        out.append(
            Hostile(
                f"wrapper-{name}",
                fakes.package(wrappers=fakes.DIRECT_WRAPPERS + source),
                supported,
            )
        )
    # A comm callable whose signature cannot be read for a BaseException.
    comm = fakes.NEW_COMM + (
        "\nclass _NoSig:\n    @property\n    def __signature__(self):\n"
        "        raise SystemExit('no signature')\n"
        "    def __call__(self, *args, **kwargs):\n        return None\n"
        "allreduce_fusion = _NoSig()\n"
    )
    out.append(
        Hostile(
            "comm-signature-raises-SystemExit",
            fakes.package(comm=comm),
            FULL - {("comm", "allreduce_fusion", "trigger_completion_at_end")},
        )
    )
    # Signature subclasses whose parameters cannot be sorted or trusted: unreadable.
    for name, parameters in SIGNATURE_PARAMETERS:
        comm = fakes.NEW_COMM + (
            "\nimport inspect\n"
            "class _Named(inspect.Parameter):\n    @property\n    def name(self):\n"
            "        return 7\n"
            "class _Sig(inspect.Signature):\n    @property\n    def parameters(self):\n"
            "        P = inspect.Parameter\n"
            f"        return {parameters}\n"
            "def allreduce_fusion(*args, trigger_completion_at_end=True, **kwargs):\n"
            "    return None\n"
            "allreduce_fusion.__signature__ = _Sig()\n"
        )
        out.append(
            Hostile(
                f"comm-signature-{name}",
                fakes.package(comm=comm),
                FULL - {("comm", "allreduce_fusion", "trigger_completion_at_end")},
            )
        )
    return out


#: ``Signature.parameters`` mappings a hostile ``__signature__`` hands out: (id, source).
SIGNATURE_PARAMETERS: tuple[tuple[str, str], ...] = (
    (
        "non-str-keys",
        '{1: P("x", P.KEYWORD_ONLY), "trigger_completion_at_end": '
        'P("trigger_completion_at_end", P.KEYWORD_ONLY)}',
    ),
    (
        "none-key",
        '{None: P("trigger_completion_at_end", P.KEYWORD_ONLY)}',
    ),
    (
        "name-not-str",
        '{"x": _Named("x", P.KEYWORD_ONLY), "trigger_completion_at_end": '
        'P("trigger_completion_at_end", P.KEYWORD_ONLY)}',
    ),
    (
        "value-not-a-parameter",
        '{"trigger_completion_at_end": "trigger_completion_at_end"}',
    ),
    (
        "key-differs-from-name",
        '{"trigger_completion_at_end": P("group", P.KEYWORD_ONLY)}',
    ),
)


BACKEND_HEAD = """
def get_global_rank(group, rank):
    return rank

class _Dist:
    get_global_rank = staticmethod(get_global_rank)

dist = _Dist()

class TorchDistBackend:
    def __init__(self, group=None):
        self._group = group
"""

#: ``TorchDistBackend.bcast`` bodies: (id, method source, whether it is group-local).
BCASTS: tuple[tuple[str, str, bool], ...] = (
    (
        "comment-only",
        "    def bcast(self, data, root):\n"
        "        # should be dist.get_global_rank(self._group, root)\n"
        "        return data\n",
        False,
    ),
    (
        "string-only",
        "    def bcast(self, data, root):\n"
        '        todo = "call get_global_rank(group, root) here"\n'
        "        return data\n",
        False,
    ),
    (
        "docstring-only",
        "    def bcast(self, data, root):\n"
        '        """Unlike get_global_rank(group, root), root is global."""\n'
        "        return data\n",
        False,
    ),
    (
        "reference-no-call",
        "    def bcast(self, data, root):\n        _ = dist.get_global_rank\n        return data\n",
        False,
    ),
    (
        "default-argument-only",
        "    @staticmethod\n    def _noop(x):\n        return x\n"
        "    def bcast(self, data, root, _r=get_global_rank(None, 0)):\n        return data\n",
        False,
    ),
    (
        "attribute-call",
        "    def bcast(self, data, root):\n"
        "        root = dist.get_global_rank(self._group, root)\n"
        "        return data\n",
        True,
    ),
    (
        "name-call",
        "    def bcast(self, data, root):\n"
        "        return self._send(data, get_global_rank(self._group, root))\n"
        "    def _send(self, data, root):\n        return data\n",
        True,
    ),
)


def bcast_packages() -> list[Hostile]:
    out = []
    for name, method, local in BCASTS:
        files = {
            **fakes.package(),
            "flashinfer/comm/comm_backend.py": BACKEND_HEAD + method,
        }
        out.append(Hostile(f"bcast-{name}", files, FULL | ({BCAST} if local else set())))
    unreadable = {
        **fakes.package(),
        "flashinfer/comm/comm_backend.py": (
            "class TorchDistBackend:\n    pass\n"
            "exec('def bcast(self, data, root):\\n    return get_global_rank(0, root)\\n')\n"
            "TorchDistBackend.bcast = bcast\n"
        ),
    }
    out.append(Hostile("bcast-source-unreadable", unreadable, FULL))
    broken = {**fakes.package(), "flashinfer/comm/comm_backend.py": "raise SystemExit(4)\n"}
    out.append(Hostile("bcast-module-raises", broken, FULL))
    return out


HOSTILE_PACKAGES: tuple[Hostile, ...] = (
    *raising_packages(),
    *noise_packages(),
    *getattr_packages(),
    *module_attribute_packages(),
    *wrapper_packages(),
    *bcast_packages(),
)
#: How many hostile packages the suite generates.
HOSTILE_PACKAGE_COUNT = len(HOSTILE_PACKAGES)
