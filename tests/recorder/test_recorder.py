"""The source recorder (``fi_compat/_recorder``) on small synthetic flashinfer trees.

No real release is needed. The last tests keep the recorder out of the shipped package:
no ``fi_compat`` module may import ``tools`` or hold the recorder again, and the tools
spell no FlashInfer name that ``fi_compat._surface`` declares.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import tarfile
import textwrap
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

import fi_compat
import fi_compat._recorder
import fi_compat._recorder.record
import tools
from fi_compat import _surface
from fi_compat._recorder import dump_record, record_release, version_from_filename
from fi_compat._recorder.archive import read_release
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.store import unpack, unpack_records
from fi_compat._recorder.surface import surface
from fi_compat._records import parse_record
from fi_compat._records._parse import name_record
from fi_compat.testing import RecordingError
from tests.support.spellings import spellings
from tools.record import main as record_main

Tree = Callable[[Mapping[str, str]], Path]

COMM_INIT = """
    from .allreduce import create_allreduce_fusion_workspace as create_allreduce_fusion_workspace
    from .allreduce import allreduce_fusion
    from .trtllm_ar import *
    from .workspace_base import AllReduceFusionWorkspace
"""

ALLREDUCE = """
    from typing import Optional
    from .workspace_base import AllReduceFusionWorkspace

    def flashinfer_api(func=None, **kw):
        return func

    @flashinfer_api
    def create_allreduce_fusion_workspace(
        backend: str = "auto", world_size: int = None, /, rank=0, *,
        group: Optional["ProcessGroup"] = None, **kwargs
    ) -> AllReduceFusionWorkspace:
        return None

    @flashinfer_api(trace=None)
    def allreduce_fusion(input, workspace, *args, trigger_completion_at_end: bool = True):
        pass

    def not_exported():
        pass
"""

TRTLLM_AR = """
    __all__ = ["trtllm_allreduce_fusion", "AllReduceFusionPattern"]

    class AllReduceFusionPattern:
        kAllReduce = 0
        kARResidualRMSNorm = 1

    def trtllm_allreduce_fusion(allreduce_in, world_size):
        pass

    def trtllm_create_ipc_workspace_for_all_reduce_fusion(tp_rank, tp_size):
        pass  # defined but not in __all__: a star import does not export it
"""

WORKSPACE_BASE = """
    from abc import ABC, abstractmethod

    class AllReduceFusionWorkspace(ABC):
        def __init__(self, world_size: int, rank: int):
            pass

        @abstractmethod
        def destroy(self) -> None:
            ...
"""

TOP_INIT = """
    from .decode import BatchDecodeWithPagedKVCacheWrapper as BatchDecodeWithPagedKVCacheWrapper
    from .prefill import BatchPrefillWithPagedKVCacheWrapper
"""

DECODE = """
    class BatchDecodeWithPagedKVCacheWrapper:
        def __init__(self, float_workspace_buffer, kv_layout="NHD"):
            pass

        def plan(self, indptr, *deprecated_positional_args, **kwargs):
            if not deprecated_positional_args:
                return self._plan_impl(indptr=indptr, **kwargs)
            merged = dict(kwargs)
            return self._plan_impl(indptr=indptr, **merged)

        def _plan_impl(self, indptr, *, fixed_split_size=None, disable_split_kv=False):
            pass
"""

PREFILL = """
    class _Base:
        def plan(self, qo_indptr, fixed_split_size=None):
            pass

    class BatchPrefillWithPagedKVCacheWrapper(_Base):
        def __init__(self, float_workspace_buffer, backend="auto"):
            pass
"""


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    count = 0

    def write(files: Mapping[str, str]) -> Path:
        nonlocal count
        count += 1
        root = tmp_path / f"src{count}"
        for relative, source in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        return root

    return write


def _base_files() -> dict[str, str]:
    return {
        "flashinfer/__init__.py": TOP_INIT,
        "flashinfer/decode.py": DECODE,
        "flashinfer/prefill.py": PREFILL,
        "flashinfer/comm/__init__.py": COMM_INIT,
        "flashinfer/comm/allreduce.py": ALLREDUCE,
        "flashinfer/comm/trtllm_ar.py": TRTLLM_AR,
        "flashinfer/comm/workspace_base.py": WORKSPACE_BASE,
        "flashinfer/comm/mnnvl.py": """
            class TorchDistBackend:
                def __init__(self, group=None):
                    self._group = group

                def bcast(self, data, root: int):
                    return data
        """,
        "flashinfer/comm/comm_backend.py": """
            class TorchDistBackend:
                def __init__(self, group=None):
                    self._group = group

                def bcast(self, data, root):
                    src = self._dist.get_global_rank(self._group, root)
                    return data
        """,
    }


def _record(tree: Tree, files: Mapping[str, str] | None = None) -> dict[str, Any]:
    return record_release(tree(files or _base_files()), release="9.9.9")


def _surface_of(tree: Tree, files: Mapping[str, str] | None = None) -> dict[str, Any]:
    return surface(Package(read_release(tree(files or _base_files()))))


def _names(
    tree: Tree, files: Mapping[str, str] | None = None, module: str = _surface.COMM
) -> dict[str, Any]:
    """The public names of ``module``'s surface record, a shared re-export (``same``) read
    as the record it shares."""
    found = _surface_of(tree, files)

    def entry(where: str, name: str) -> dict[str, Any]:
        data = dict(found[where]["names"][name])
        if "same" in data:
            shared = entry(data["defined_in"], data["same"])
            shared.pop("conditional", None)
            return {**shared, **({"conditional": True} if data.get("conditional") else {})}
        return data

    return {
        name: entry(module, name)
        for name in found.get(module, {}).get("names", {})
        if not name.startswith("_")
    }


def _typed(tree: Tree, files: Mapping[str, str] | None = None) -> Any:
    """The release as the loader reads it, its name tables from the surface."""
    found = _surface_of(tree, files)
    tables = {
        module: {
            name: name_record(name, entry) for name, entry in _names(tree, files, module).items()
        }
        for module in found
    }
    return parse_record(_record(tree, files), names=tables)


def _params(record: Mapping[str, Any] | None) -> list[tuple[str, str, str | None]]:
    assert record is not None
    return [(p["name"], p["kind"], p.get("default")) for p in record["parameters"]]


def test_reexports_are_followed_to_the_defining_module(tree: Tree) -> None:
    comm = _record(tree)["comm"]
    functions = comm["functions"]
    assert functions["create_allreduce_fusion_workspace"]["defined_in"] == (
        "flashinfer.comm.allreduce"
    )
    assert functions["allreduce_fusion"]["defined_in"] == "flashinfer.comm.allreduce"
    # Exported through ``from .trtllm_ar import *`` and listed in its __all__.
    assert functions["trtllm_allreduce_fusion"]["defined_in"] == "flashinfer.comm.trtllm_ar"


def test_names_not_in_the_comm_namespace_are_recorded_as_null(tree: Tree) -> None:
    functions = _record(tree)["comm"]["functions"]
    # Defined in trtllm_ar but excluded from its __all__, so not bound in flashinfer.comm.
    assert functions["trtllm_create_ipc_workspace_for_all_reduce_fusion"] is None
    assert functions["trtllm_destroy_ipc_workspace_for_all_reduce_fusion"] is None
    assert "trtllm_destroy_ipc_workspace_for_all_reduce_fusion" in functions


def test_parameter_kinds_defaults_and_annotations_match_inspect(tree: Tree) -> None:
    recorded = _record(tree)["comm"]["functions"]["create_allreduce_fusion_workspace"]

    def reference(
        backend: str = "auto",
        world_size: int | None = None,
        /,
        rank: int = 0,
        *,
        group: Any = None,
        **kwargs: Any,
    ) -> None: ...

    expected = [
        (p.name, p.kind.name, None if p.default is p.empty else repr(p.default))
        for p in inspect.signature(reference).parameters.values()
    ]
    assert _params(recorded) == expected
    assert recorded["parameters"][0]["annotation"] == "str"
    assert recorded["parameters"][3]["annotation"] == "Optional['ProcessGroup']"
    assert "annotation" not in recorded["parameters"][2]
    assert recorded["returns"] == "AllReduceFusionWorkspace"
    assert recorded["decorators"] == ["flashinfer_api"]


def test_var_positional_and_keyword_only(tree: Tree) -> None:
    recorded = _record(tree)["comm"]["functions"]["allreduce_fusion"]
    assert _params(recorded) == [
        ("input", "POSITIONAL_OR_KEYWORD", None),
        ("workspace", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("trigger_completion_at_end", "KEYWORD_ONLY", "True"),
    ]
    assert recorded["decorators"] == ["flashinfer_api(trace=None)"]


def test_enum_members_and_workspace_class(tree: Tree) -> None:
    comm = _record(tree)["comm"]
    assert comm["enums"]["AllReduceFusionPattern"]["members"] == {
        "kAllReduce": 0,
        "kARResidualRMSNorm": 1,
    }
    assert comm["workspace_classes"] == ["AllReduceFusionWorkspace"]
    workspace = comm["classes"]["AllReduceFusionWorkspace"]
    assert workspace["defined_in"] == "flashinfer.comm.workspace_base"
    assert workspace["methods"]["destroy"]["decorators"] == ["abstractmethod"]
    assert _params(workspace["methods"]["destroy"]) == [("self", "POSITIONAL_OR_KEYWORD", None)]


def test_torch_dist_backend_prefers_comm_backend_and_sees_get_global_rank(tree: Tree) -> None:
    backend = _record(tree)["comm"]["classes"]["TorchDistBackend"]
    assert backend["module"] == "flashinfer.comm.comm_backend"
    assert backend["bcast_root_is_group_local"] is True
    files = _base_files()
    del files["flashinfer/comm/comm_backend.py"]
    old = _record(tree, files)["comm"]["classes"]["TorchDistBackend"]
    assert old["module"] == "flashinfer.comm.mnnvl"
    assert old["bcast_root_is_group_local"] is False


def test_plan_forwarding_and_inherited_plan(tree: Tree) -> None:
    attention = _record(tree)["attention"]
    decode = attention["BatchDecodeWithPagedKVCacheWrapper"]
    assert decode["plan_forwards_to"] == "_plan_impl"
    assert decode["methods"]["plan"]["forwards_kwargs_to"] == "_plan_impl"
    assert [p["name"] for p in decode["methods"]["_plan_impl"]["parameters"]] == [
        "self",
        "indptr",
        "fixed_split_size",
        "disable_split_kv",
    ]
    prefill = attention["BatchPrefillWithPagedKVCacheWrapper"]
    assert prefill["methods"]["plan"]["qualname"] == "_Base.plan"
    assert prefill["plan_forwards_to"] is None
    assert attention["BatchPrefillWithRaggedKVCacheWrapper"] is None


def test_loader_answers_accepts_through_the_forward(tree: Tree) -> None:
    record = parse_record(_record(tree))
    assert record.accepts("BatchDecodeWithPagedKVCacheWrapper.plan", "fixed_split_size")
    assert record.acceptance("BatchDecodeWithPagedKVCacheWrapper.plan", "nope") == "unsupported"
    assert record.accepts("BatchPrefillWithPagedKVCacheWrapper.plan", "fixed_split_size")
    # ``**kwargs`` with no recorded destination: unknown, and not "accepted".
    assert record.acceptance("create_allreduce_fusion_workspace", "anything") == "unknown"
    assert not record.accepts("create_allreduce_fusion_workspace", "anything")
    assert record.acceptance("trtllm_create_ipc_workspace_for_all_reduce_fusion", "group") == (
        "unsupported"
    )


CUDA_IPC = """
    def find_loaded_library(name):
        return None

    class CudaRTLibrary:
        def __init__(self, so_file=None):
            if so_file is None:
                so_file = find_loaded_library("libcudart")
                assert so_file is not None, "libcudart is not loaded in the current process"

    {tail}
"""


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("cudart = CudaRTLibrary()", True),
        ("def get():\n        return CudaRTLibrary()", False),
        (
            "try:\n        cudart = CudaRTLibrary()\n    except Exception:\n        cudart = None",
            False,
        ),
    ],
)
def test_cuda_runtime_hazard(tree: Tree, tail: str, expected: bool) -> None:
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = (
        "from .cuda_ipc import CudaRTLibrary\n" + textwrap.dedent(COMM_INIT)
    )
    files["flashinfer/comm/cuda_ipc.py"] = CUDA_IPC.replace("{tail}", tail)
    hazard = _record(tree, files)["import"]["comm_requires_cuda_runtime"]
    assert hazard["value"] is expected
    if expected:
        assert hazard["evidence"].startswith("flashinfer/comm/cuda_ipc.py:")
        assert "libcudart is not loaded" in hazard["evidence"]
    else:
        assert hazard["evidence"] is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\nN = torch.cuda.get_device_properties(0).multi_processor_count", True),
        (
            "import torch\nif torch.cuda.is_available():\n"
            "    N = torch.cuda.get_device_capability(0)",
            False,
        ),
        ("import torch\ndef f():\n    return torch.cuda.get_device_properties(0)", False),
        # Still queried at import (the error is merely swallowed).
        (
            "import torch\ntry:\n    N = torch.cuda.current_device()\nexcept Exception:\n    N = 0",
            True,
        ),
    ],
)
def test_gpu_query_hazard_follows_the_import_chain(tree: Tree, source: str, expected: bool) -> None:
    files = _base_files()
    files["flashinfer/__init__.py"] = textwrap.dedent(TOP_INIT) + "from . import kernels\n"
    files["flashinfer/kernels/__init__.py"] = "from .sms import *\n"
    files["flashinfer/kernels/sms.py"] = source
    hazard = _record(tree, files)["import"]["import_queries_gpu"]
    assert hazard["value"] is expected
    if expected:
        assert hazard["evidence"].startswith("flashinfer/kernels/sms.py:")


@pytest.mark.parametrize(
    ("comm_line", "expected"),
    [
        ("from .matmul import run\n", True),
        ("try:\n    from .matmul import run\nexcept ImportError:\n    run = None\n", False),
    ],
)
def test_triton_hazard(tree: Tree, comm_line: str, expected: bool) -> None:
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = comm_line + textwrap.dedent(COMM_INIT)
    files["flashinfer/comm/matmul.py"] = "import triton\n\ndef run():\n    pass\n"
    hazard = _record(tree, files)["import"]["comm_requires_triton"]
    assert hazard["value"] is expected


def test_a_rename_in_the_surface_is_recorded_under_the_name_found(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What to record comes from fi_compat._surface: a rename upstream is a new Home there.
    fusion = _surface.UNIFIED_FUSION
    renamed = dataclasses.replace(
        fusion, homes=(_surface.Home(_surface.COMM, "allreduce_fusion_v2", "9.9.9"), *fusion.homes)
    )
    symbols = tuple(renamed if s is fusion else s for s in _surface.COMM_SYMBOLS)
    monkeypatch.setattr(fi_compat._recorder.record, "COMM_SYMBOLS", symbols)
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = textwrap.dedent(COMM_INIT).replace(
        "import allreduce_fusion\n", "import allreduce_fusion as allreduce_fusion_v2\n"
    )
    functions = _record(tree, files)["comm"]["functions"]
    assert functions["allreduce_fusion"] is None
    assert functions["allreduce_fusion_v2"]["qualname"] == "allreduce_fusion"
    assert functions["allreduce_fusion_v2"]["defined_in"] == "flashinfer.comm.allreduce"


def test_no_comm_package(tree: Tree) -> None:
    files = {k: v for k, v in _base_files().items() if not k.startswith("flashinfer/comm")}
    record = _record(tree, files)
    assert record["comm"]["exists"] is False
    assert set(record["comm"]["functions"].values()) == {None}
    assert record["comm"]["classes"]["TorchDistBackend"] is None
    assert record["import"]["comm_requires_cuda_runtime"]["value"] is False


def test_wheel_sdist_and_tree_give_the_same_record(tree: Tree, tmp_path: Path) -> None:
    root = tree(_base_files())
    wheel = tmp_path / "flashinfer_python-9.9.9-py3-none-any.whl"
    sdist = tmp_path / "flashinfer_python-9.9.9.tar.gz"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in sorted(root.rglob("*.py")):
            archive.write(path, path.relative_to(root).as_posix())
    with tarfile.open(sdist, "w:gz") as archive:
        for path in sorted(root.rglob("*.py")):
            data = path.read_bytes()
            info = tarfile.TarInfo("flashinfer_python-9.9.9/" + path.relative_to(root).as_posix())
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    records = [record_release(p) for p in (wheel, sdist)] + [_record(tree)]
    for record in records:
        del record["source"]
    assert records[0] == records[1] == records[2]
    assert records[0]["release"] == "9.9.9"


def test_dump_is_deterministic_and_round_trips(tree: Tree, tmp_path: Path) -> None:
    root = tree(_base_files())
    first = dump_record(record_release(root, release="9.9.9"))
    second = dump_record(record_release(root, release="9.9.9"))
    assert first == second
    assert first.endswith("}\n")
    assert "\n" not in first[:-1]
    assert dump_record(json.loads(first)) == first


def test_cli_writes_the_json(
    tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree(_base_files())
    arguments = ["--path", str(root), "--release", "9.9.9"]
    assert record_main([*arguments, "--output", str(tmp_path / "o")]) == 0
    # The release's record and its surface went into the one store.
    data = (tmp_path / "o" / "surface.zip").read_bytes()
    record = unpack_records(data)["9.9.9"]
    assert record["comm"]["functions"]["allreduce_fusion"]["defined_in"] == (
        "flashinfer.comm.allreduce"
    )
    stored = unpack(data)
    assert list(stored) == ["9.9.9"]
    assert stored["9.9.9"] == _surface_of(tree)
    written = capsys.readouterr().out.splitlines()
    assert written == ["recorded 9.9.9", str(tmp_path / "o" / "surface.zip")]
    assert not list((tmp_path / "o").glob("*.json.gz"))
    assert record_main([*arguments, "--output", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["release"] == "9.9.9"


def test_version_from_filename() -> None:
    assert version_from_filename("flashinfer_python-0.7.2.post1-py3-none-any.whl") == "0.7.2.post1"
    assert version_from_filename("flashinfer_python-0.3.1.tar.gz") == "0.3.1"
    assert version_from_filename("flashinfer-python-0.2.9.tar.gz") == "0.2.9"
    assert version_from_filename("torch-2.0.whl") is None


def test_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordingError, match=r"flashinfer/__init__\.py"):
        record_release(tmp_path / "empty", release="1.0")
    with pytest.raises(ValueError, match="release version"):
        record_release(tmp_path / "empty")


def test_workspace_classes_include_the_ones_the_factory_builds(tree: Tree) -> None:
    files = _base_files()
    files["flashinfer/comm/allreduce.py"] = textwrap.dedent(ALLREDUCE).replace(
        "    return None\n",
        "    if backend == 'a':\n"
        "        return TRTLLMWorkspace(world_size, rank)\n"
        "    from .cute import CuteWorkspace\n"
        "    return CuteWorkspace(world_size, rank)\n",
    ) + textwrap.dedent(
        """
        class TRTLLMWorkspace(AllReduceFusionWorkspace):
            pass
        """
    )
    files["flashinfer/comm/cute.py"] = textwrap.dedent(
        """
        from .workspace_base import AllReduceFusionWorkspace

        class CuteWorkspace(AllReduceFusionWorkspace):
            def destroy(self, force: bool = False) -> None:
                pass
        """
    )
    comm = _record(tree, files)["comm"]
    assert comm["workspace_classes"] == [
        "AllReduceFusionWorkspace",
        "TRTLLMWorkspace",
        "CuteWorkspace",
    ]
    trtllm = comm["classes"]["TRTLLMWorkspace"]
    assert trtllm["exported"] is False
    assert trtllm["defined_in"] == "flashinfer.comm.allreduce"
    # destroy is inherited from the base class.
    assert trtllm["methods"]["destroy"]["qualname"] == "AllReduceFusionWorkspace.destroy"
    cute = comm["classes"]["CuteWorkspace"]
    assert cute["defined_in"] == "flashinfer.comm.cute"
    assert [p["name"] for p in cute["methods"]["destroy"]["parameters"]] == ["self", "force"]
    assert comm["classes"]["AllReduceFusionWorkspace"]["exported"] is True


# ------------------------------------------- public names, attributes, fast_decode_plan

KINDS_INIT = """
    import os
    import typing
    import contextlib as _contextlib
    from typing import Optional
    from . import mnnvl
    from .kinds import Color, Shade, Holder, Widget, Config, helper, CONSTANT, alias
    from .kinds import Lazy

    _private = 1
    VALUE = 3
    annotated_only: int

    def _hidden():
        pass

    if typing.TYPE_CHECKING:
        from .kinds import OnlyTyped
"""

KINDS = """
    import enum
    from dataclasses import dataclass
    from enum import IntEnum
    from typing import ClassVar

    class Color(IntEnum):
        RED = 1
        GREEN = 2

    class Shade(enum.Enum):
        DARK = 0

    class Holder:
        '''Constants only, the way AllReduceFusionPattern is written.'''
        A = 0
        B = 1 << 1

    class Base:
        def __init__(self, world_size):
            self.world_size = world_size
            self._destroyed = False

    class Widget(Base):
        LIMIT = 4

        def __init__(self, world_size, flag=False):
            super().__init__(world_size)
            self.metadata = {}
            self.a, self.b = 1, 2
            self.count += 1
            self.typed: int = 0
            self.other.inner = 3
            if flag:
                self._setup()

        def _setup(self):
            self.from_helper = 1
            self._deeper()

        def _deeper(self):
            self.too_deep = 1

        @property
        def backend(self):
            return "x"

        def destroy(self):
            self.after_init = None

        @staticmethod
        def size(n):
            return n

    @dataclass
    class Config:
        comm_backend: object = None
        page_size: int = 0
        KIND: ClassVar[str] = "x"

    def helper(x, *, y=1):
        pass

    CONSTANT = 5
    alias = helper
"""


def _kinds_files() -> dict[str, str]:
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = KINDS_INIT
    files["flashinfer/comm/kinds.py"] = KINDS
    return files


def test_comm_names_follow_from_imports_star_imports_and_all(tree: Tree) -> None:
    names = _names(tree)
    # ``from .allreduce import ...`` (aliased or not), ``from .trtllm_ar import *`` limited
    # to that module's __all__, ``from .workspace_base import ...``; nothing else: not the
    # submodules the imports bind as a side effect, not names __all__ leaves out.
    assert names == {
        "AllReduceFusionPattern": {
            "kind": "enum",
            "defined_in": "flashinfer.comm.trtllm_ar",
            "class": names["AllReduceFusionPattern"]["class"],
            "enum": {
                "defined_in": "flashinfer.comm.trtllm_ar",
                "bases": [],
                "members": {"kAllReduce": 0, "kARResidualRMSNorm": 1},
            },
        },
        "AllReduceFusionWorkspace": {
            "kind": "class",
            "defined_in": "flashinfer.comm.workspace_base",
            "class": names["AllReduceFusionWorkspace"]["class"],
        },
        "allreduce_fusion": {
            "kind": "function",
            "defined_in": "flashinfer.comm.allreduce",
            "function": names["allreduce_fusion"]["function"],
        },
        "create_allreduce_fusion_workspace": {
            "kind": "function",
            "defined_in": "flashinfer.comm.allreduce",
            "function": names["create_allreduce_fusion_workspace"]["function"],
        },
        "trtllm_allreduce_fusion": {
            "kind": "function",
            "defined_in": "flashinfer.comm.trtllm_ar",
            "function": names["trtllm_allreduce_fusion"]["function"],
        },
    }
    # The function records are the very records of comm.functions.
    functions = _record(tree)["comm"]["functions"]
    assert names["allreduce_fusion"]["function"] == functions["allreduce_fusion"]
    workspace = names["AllReduceFusionWorkspace"]["class"]
    assert sorted(workspace["methods"]) == ["__init__", "destroy"]
    assert workspace["attributes"] == []


def test_a_literal_all_decides_the_names(tree: Tree) -> None:
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = textwrap.dedent(COMM_INIT) + (
        "__all__ = ['allreduce_fusion', '_private', 'served_lazily']\n"
    )
    # Every name the module binds is there (``from comm import x`` works whatever
    # ``__all__`` says), and so is each ``__all__`` entry; ``__all__`` is kept as written.
    found = _surface_of(tree, files)[_surface.COMM]
    assert found["all"] == ["_private", "allreduce_fusion", "served_lazily"]
    names = _names(tree, files)
    assert {"allreduce_fusion", "served_lazily", "create_allreduce_fusion_workspace"} <= set(names)
    # Listed but bound by nothing the source shows (a module __getattr__, say).
    assert names["served_lazily"] == {"kind": "value", "defined_in": None}
    assert found["names"]["_private"] == {"kind": "value", "defined_in": None}
    record = _typed(tree, files).public_names(_surface.COMM)
    assert record["served_lazily"].function is None
    assert record["allreduce_fusion"].function is not None
    assert "_private" not in record


def test_kinds_private_names_and_type_checking_only_names(tree: Tree) -> None:
    names = _names(tree, _kinds_files())
    assert sorted(names) == [
        "CONSTANT",
        "Color",
        "Config",
        "Holder",
        "Lazy",
        "Optional",
        "Shade",
        "VALUE",
        "Widget",
        "alias",
        "helper",
        "mnnvl",
        "os",
        "typing",
    ]
    kinds = {name: (entry["kind"], entry["defined_in"]) for name, entry in names.items()}
    assert kinds == {
        "CONSTANT": ("value", "flashinfer.comm.kinds"),
        "Color": ("enum", "flashinfer.comm.kinds"),
        "Config": ("class", "flashinfer.comm.kinds"),
        "Holder": ("enum", "flashinfer.comm.kinds"),
        # Imported from a module of the release that does not bind it.
        "Lazy": ("value", None),
        # From outside the release: where it comes from, its kind unknown to the source.
        "Optional": ("value", "typing"),
        "Shade": ("enum", "flashinfer.comm.kinds"),
        "VALUE": ("value", "flashinfer.comm"),
        "Widget": ("class", "flashinfer.comm.kinds"),
        "alias": ("function", "flashinfer.comm.kinds"),
        "helper": ("function", "flashinfer.comm.kinds"),
        "mnnvl": ("module", "flashinfer.comm.mnnvl"),
        "os": ("module", "os"),
        "typing": ("module", "typing"),
    }
    assert names["alias"]["function"]["qualname"] == "helper"
    assert names["Color"]["enum"]["members"] == {"RED": 1, "GREEN": 2}
    assert names["Holder"]["enum"]["members"] == {"A": 0, "B": "1 << 1"}
    assert set(names["mnnvl"]) == set(names["os"]) == {"kind", "defined_in"}


def test_class_records_in_name_tables_have_every_public_method(tree: Tree) -> None:
    widget = _names(tree, _kinds_files())["Widget"]["class"]
    assert sorted(widget["methods"]) == ["__init__", "backend", "destroy", "size"]
    assert widget["methods"]["backend"]["decorators"] == ["property"]
    assert widget["methods"]["size"]["decorators"] == ["staticmethod"]
    assert widget["bases"] == ["Base"]
    loaded = _typed(tree, _kinds_files()).public_names(_surface.COMM)["Widget"]
    assert loaded.cls is not None
    backend, destroy = loaded.cls.method("backend"), loaded.cls.method("destroy")
    assert backend is not None
    assert destroy is not None
    assert backend.is_property
    assert not destroy.is_property


def test_attributes_come_from_init_its_helpers_and_super_init(tree: Tree) -> None:
    names = _names(tree, _kinds_files())
    # __init__ (plain, tuple, augmented and annotated targets), the helper it calls
    # (``_setup``, one level: not ``_deeper``), Base.__init__ through super(); not what
    # other methods assign (``destroy``) nor attributes of attributes (``other.inner``).
    assert names["Widget"]["class"]["attributes"] == [
        "_destroyed",
        "a",
        "b",
        "count",
        "from_helper",
        "metadata",
        "typed",
        "world_size",
    ]
    # A dataclass: its fields, not its ClassVar; its __init__ is the one the fields make.
    config = names["Config"]["class"]
    assert config["attributes"] == ["comm_backend", "page_size"]
    init = config["methods"]["__init__"]
    assert init["decorators"] == ["generated"]
    assert _params(init) == [
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("comm_backend", "POSITIONAL_OR_KEYWORD", "None"),
        ("page_size", "POSITIONAL_OR_KEYWORD", "0"),
    ]


def test_every_recorded_class_gets_attributes(tree: Tree) -> None:
    files = _base_files()
    files["flashinfer/decode.py"] = textwrap.dedent(DECODE).replace(
        'kv_layout="NHD"):\n        pass\n',
        'kv_layout="NHD"):\n'
        "        self._backend = 'auto'\n"
        "        self._init_buffers()\n"
        "\n"
        "    def _init_buffers(self):\n"
        "        self._use_cuda_graph = False\n",
    )
    assert "_init_buffers" in files["flashinfer/decode.py"]
    record = _record(tree, files)
    decode = record["attention"]["BatchDecodeWithPagedKVCacheWrapper"]
    assert decode["attributes"] == ["_backend", "_use_cuda_graph"]
    assert record["comm"]["classes"]["TorchDistBackend"]["attributes"] == ["_group"]
    assert record["comm"]["classes"]["AllReduceFusionWorkspace"]["attributes"] == []
    loaded = parse_record(record)
    wrapper = loaded.wrapper("BatchDecodeWithPagedKVCacheWrapper")
    assert wrapper is not None
    assert wrapper.attributes == ("_backend", "_use_cuda_graph")


MNNVL = """
    import typing
    from .comm_backend import TorchDistBackend
    from .abstractions import CommBackend

    if typing.TYPE_CHECKING:
        from torch.distributed import ProcessGroup

    def is_multicast_supported(device_idx: int) -> bool:
        return False

    def _private_helper():
        pass
"""


def test_mnnvl_submodule_present_and_absent(tree: Tree) -> None:
    files = _base_files()
    files["flashinfer/comm/mnnvl.py"] = MNNVL
    files["flashinfer/comm/abstractions.py"] = (
        "class CommBackend:\n    def bcast(self, x):\n        pass\n"
    )
    table = _names(tree, files, _surface.MNNVL_MODULE)
    assert sorted(table) == [
        "CommBackend",
        "TorchDistBackend",
        "is_multicast_supported",
        "typing",
    ]
    assert table["TorchDistBackend"]["defined_in"] == "flashinfer.comm.comm_backend"
    assert table["TorchDistBackend"]["class"]["attributes"] == ["_group"]
    assert table["is_multicast_supported"]["function"]["returns"] == "bool"
    assert "_private_helper" in _surface_of(tree, files)[_surface.MNNVL_MODULE]["names"]
    names = _typed(tree, files).public_names(_surface.MNNVL_MODULE)
    assert names["CommBackend"].kind == "class"
    assert names["CommBackend"].defined_in == "flashinfer.comm.abstractions"
    del files["flashinfer/comm/mnnvl.py"]
    assert _surface.MNNVL_MODULE not in _surface_of(tree, files)
    without = _typed(tree, files)
    assert without.public_names(_surface.MNNVL_MODULE) == {}
    assert without.public_names(_surface.COMM) != {}
    assert without.module(_surface.MNNVL_MODULE) is None


FAST_DECODE_PLAN = """
    def fast_decode_plan(
        self, indptr, indices, page_size, fixed_split_size=None, disable_split_kv=False
    ) -> None:
        pass
"""


def test_fast_decode_plan_present_and_absent(tree: Tree) -> None:
    key = _surface.FAST_DECODE_PLAN.key
    absent = _record(tree)
    assert absent["decode"] == {key: None}
    assert parse_record(absent).fast_decode_plan is None
    files = _base_files()
    files["flashinfer/decode.py"] = textwrap.dedent(DECODE) + textwrap.dedent(FAST_DECODE_PLAN)
    present = _record(tree, files)
    recorded = present["decode"][key]
    assert recorded["defined_in"] == _surface.DECODE_MODULE
    assert recorded["qualname"] == key
    assert recorded["returns"] == "None"
    plan = parse_record(present).fast_decode_plan
    assert plan is not None
    assert plan.keyword_names == (
        "self",
        "indptr",
        "indices",
        "page_size",
        "fixed_split_size",
        "disable_split_kv",
    )
    assert plan.parameter("disable_split_kv") is not None


def test_from_a_package_import_prefers_its_binding_to_its_submodule(tree: Tree) -> None:
    # As Python does: the package's own ``agm`` (a function) wins over its submodule ``agm``.
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = "from .agm import agm\nfrom .agm import impl\n"
    files["flashinfer/comm/agm/__init__.py"] = "from .agm import agm\n"
    files["flashinfer/comm/agm/agm.py"] = "def agm(x):\n    pass\n"
    files["flashinfer/comm/agm/impl.py"] = "X = 1\n"
    names = _names(tree, files)
    assert names["agm"]["kind"] == "function"
    assert names["agm"]["defined_in"] == "flashinfer.comm.agm.agm"
    assert names["impl"] == {"kind": "module", "defined_in": "flashinfer.comm.agm.impl"}


def test_star_imports_are_listed_through_the_target_module(tree: Tree) -> None:
    files = _base_files()
    files["flashinfer/comm/__init__.py"] = "from .plain import *\n"
    files["flashinfer/comm/plain.py"] = "import os\nfrom .deeper import *\nA = 1\n_B = 2\n"
    files["flashinfer/comm/deeper.py"] = "def f():\n    pass\n"
    names = _names(tree, files)
    assert sorted(names) == ["A", "f", "os"]
    assert names["f"]["defined_in"] == "flashinfer.comm.deeper"
    # A star import from outside the release binds what its source cannot tell: the
    # module is recorded as open (its other names are unknown, not absent).
    files["flashinfer/comm/__init__.py"] = "from torch import *\nB = 1\n"
    found = _surface_of(tree, files)[_surface.COMM]
    assert found["open"] == ["torch"]
    assert "B" in found["names"]


FAMILY_TOP_INIT = (
    TOP_INIT
    + """
    from .decode import CUDAGraphBatchDecodeWithPagedKVCacheWrapper
    from .cascade import BatchPrefillWithSharedPrefixPagedKVCacheWrapper
"""
)
FAMILY_DECODE = (
    DECODE
    + """
        begin_forward = plan

        def run(self, q):
            pass

        forward = run

    class CUDAGraphBatchDecodeWithPagedKVCacheWrapper(BatchDecodeWithPagedKVCacheWrapper):
        def __init__(self, workspace_buffer, use_tensor_cores=False):
            super().__init__(workspace_buffer)
            self._use_tensor_cores = use_tensor_cores
"""
)
CASCADE = """
    from typing import overload

    class BatchPrefillWithSharedPrefixPagedKVCacheWrapper:
        def __init__(self, float_workspace_buffer):
            self._kv_layout = "NHD"

        def begin_forward(self, qo_indptr):
            pass

        @overload
        def forward(self, q, return_lse: bool = False): ...

        @overload
        def forward(self, q, k, v): ...

        def forward(self, q, *args, out=None):
            pass
"""


def test_attention_families_with_aliases_bases_and_overloads(tree: Tree) -> None:
    files = _base_files()
    files["flashinfer/__init__.py"] = FAMILY_TOP_INIT
    files["flashinfer/decode.py"] = FAMILY_DECODE
    files["flashinfer/cascade.py"] = CASCADE
    data = _record(tree, files)
    families = data["attention_families"]
    assert set(families) == set(_surface.ATTENTION_FAMILIES)
    assert families["BatchMLAPagedAttentionWrapper"] is None
    decode = families["BatchDecodeWithPagedKVCacheWrapper"]
    assert decode["aliases"] == {"begin_forward": "plan", "forward": "run"}
    assert "begin_forward" not in decode["methods"]
    assert decode["plan_forwards_to"] == "_plan_impl"
    assert decode["family_bases"] == []
    graph = families["CUDAGraphBatchDecodeWithPagedKVCacheWrapper"]
    assert graph["family_bases"] == ["BatchDecodeWithPagedKVCacheWrapper"]
    assert graph["aliases"] == {"begin_forward": "plan", "forward": "run"}
    assert graph["methods"]["plan"]["qualname"] == "BatchDecodeWithPagedKVCacheWrapper.plan"
    assert graph["attributes"] == ["_use_tensor_cores"]
    shared = families["BatchPrefillWithSharedPrefixPagedKVCacheWrapper"]
    assert shared["methods"]["plan"] is None
    assert shared["aliases"] == {}
    # The implementation after the @overload stubs, as Python binds it.
    assert _params(shared["methods"]["forward"]) == [
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("q", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("out", "KEYWORD_ONLY", "None"),
    ]
    # The three wrappers' records are unchanged by it.
    assert data["attention"] == _record(tree)["attention"]
    record = parse_record(data)
    loaded = record.attention_family("CUDAGraphBatchDecodeWithPagedKVCacheWrapper")
    assert loaded is not None
    assert loaded.method("begin_forward") == loaded.method("plan")
    assert record.accepts("CUDAGraphBatchDecodeWithPagedKVCacheWrapper.plan", "fixed_split_size")
    assert record.attention_families == (
        "BatchPrefillWithPagedKVCacheWrapper",
        "BatchDecodeWithPagedKVCacheWrapper",
        "CUDAGraphBatchDecodeWithPagedKVCacheWrapper",
        "BatchPrefillWithSharedPrefixPagedKVCacheWrapper",
    )


def test_schema_is_3(tree: Tree) -> None:
    # Schema 3 leaves every name table to the surface store.
    record = _record(tree)
    assert record["schema"] == fi_compat._recorder.SCHEMA_VERSION == 3
    assert "names" not in record["comm"]
    assert "modules" not in record
    assert parse_record(record).public_names(_surface.COMM) == {}


# ------------------------------------------------------ the recorder is not in the wheel

PACKAGE = Path(fi_compat.__file__).parent
TOOLS = Path(tools.__file__).parent


def _python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_fi_compat_module_imports_the_tools() -> None:
    # Engines install fi-compat without tools/: an import of it would fail for them.
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in _imported_modules(path) if name.split(".")[0] == "tools"
        )
        for path in _python_files(PACKAGE)
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_recorder_has_one_home() -> None:
    # The builder of a release's model ships in the package (issue 49: a release fi-compat
    # did not ship data for is modelled on the user's machine), and nowhere else: no other
    # module of the package or the tools defines what it offers again.
    assert not (TOOLS / "recorder").exists()
    offered = set(fi_compat._recorder.__all__)
    home = PACKAGE / "_recorder"
    defined = {
        f"{path}: {node.name}"
        for path in [*_python_files(PACKAGE), *_python_files(TOOLS)]
        if home not in path.parents
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in offered
    }
    assert defined == set()


@pytest.mark.parametrize("path", _python_files(TOOLS), ids=lambda path: path.name)
def test_the_tools_spell_no_flashinfer_name_the_surface_declares(path: Path) -> None:
    # The same check as for the package itself: names come from fi_compat._surface.
    assert spellings(path, own_names=False) == [], "use the symbols of fi_compat._surface instead"
