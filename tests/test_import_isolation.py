"""Importing fi-compat, and using what needs no backend, loads neither torch nor FlashInfer.

The one place this promise is tested: every public module and the calls that must stay
light (the lazy names of the top-level package, the comm drop-in names, the finder of comm's
submodules and the names it refuses, the recorded releases of the testing kit, the span
checks of the planner, the policy).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fi_compat

HEAVY = ("torch", "flashinfer", "numpy")


@pytest.mark.parametrize(
    "statement",
    [
        "import fi_compat",
        "import fi_compat; fi_compat.get_capabilities; fi_compat.FiCompatError",
        "import fi_compat.capabilities, fi_compat.errors, fi_compat.determinism",
        "import fi_compat.report, fi_compat.hazards, fi_compat.cli",
        "import fi_compat.policy; fi_compat.policy.decide_fusion",
        "import warnings, fi_compat.policy as p\n"
        "p.decide_fusion(p.Deployment(architecture='LlamaForCausalLM', compute_capability=(9, 0),"
        " tp_size=4, deterministic=False), p.engine_rules('vllm', '0.33.0').rules)\n"
        "for bad in [('trtllm', None), (None, None), ('sglang', 3)]:\n"
        "    try:\n        p.engine_rules(*bad)\n"
        "    except p.PolicyInputError:\n        pass\n"
        "    else:\n        raise AssertionError(bad)\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n    p.SGLANG_0_5_23_RULES",
        "import fi_compat.comm",
        "import fi_compat.comm as c; c.AllReduceFusionPattern.kARResidualRMSNorm; dir(c)",
        "from fi_compat.comm import create_workspace, allreduce_residual_rmsnorm",
        "from fi_compat.comm import create_allreduce_fusion_workspace, allreduce_fusion",
        "import fi_compat.comm as c, fi_compat.comm.mnnvl as m\n"
        "assert not hasattr(c, '__wrapped__') and not hasattr(m, '_private'); dir(m)",
        "from fi_compat.comm import *",
        "import sys, fi_compat.comm\n"
        "from fi_compat.comm._submodules import SubmoduleFinder\n"
        "assert isinstance(sys.meta_path[-1], SubmoduleFinder)\n"
        "for name in ('_private', '__path__', 'no-such', 'mnnvl.extra'):\n"
        "    try:\n        __import__('fi_compat.comm.' + name)\n"
        "    except ModuleNotFoundError:\n        pass",
        "import fi_compat.attention",
        "from fi_compat.attention import full_span, PlannerConfigError\n"
        "try:\n    full_span([1, 2])\nexcept PlannerConfigError:\n    pass",
        "import fi_compat.testing, fi_compat.testing.pytest_plugin\n"
        "fi_compat.testing.load_release('0.6.5')",
    ],
    ids=lambda statement: statement.splitlines()[0],
)
def test_import_loads_no_backend(statement: str) -> None:
    code = (
        f"{statement}\n"
        "import sys\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]", result.stdout


# ------------------------------------------------------------ the testing kit stays apart

PACKAGE = Path(fi_compat.__file__).resolve().parent
TESTING = "fi_compat.testing"


def _runtime_modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if "testing" not in path.relative_to(PACKAGE).parts[:1]
    )


def _imported(path: Path, source: str | None = None) -> set[str]:
    """Every module the package file ``path`` imports (its text, or ``source`` as though it
    were its text), relative imports made absolute."""
    module = ".".join(("fi_compat", *path.relative_to(PACKAGE).with_suffix("").parts))
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
        package = module
    else:
        package = module.rpartition(".")[0]
    found: set[str] = set()
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return found


def test_no_runtime_module_imports_the_testing_kit() -> None:
    modules = _runtime_modules()
    assert len(modules) > 30
    offenders = {
        path.relative_to(PACKAGE).as_posix(): sorted(
            name for name in _imported(path) if name == TESTING or name.startswith(TESTING + ".")
        )
        for path in modules
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_import_scan_sees_relative_and_absolute_imports() -> None:
    """The scan above would see the testing kit however a module spelled its import."""
    where = PACKAGE / "comm" / "_factory.py"
    for source in (
        "from fi_compat.testing import load_release\n",
        "import fi_compat.testing._fake\n",
        "from ..testing import fake_flashinfer\n",
        "from .. import testing\n",
        "def late():\n    from fi_compat.testing._fake import Call\n",
    ):
        found = _imported(where, source)
        assert any(name == TESTING or name.startswith(TESTING + ".") for name in found), source


@pytest.mark.parametrize(
    "statement",
    [
        "import fi_compat, fi_compat.comm, fi_compat.comm.mnnvl, fi_compat.attention",
        "import fi_compat.report, fi_compat.cli, fi_compat.policy, fi_compat.hazards",
        "import fi_compat.comm._factory, fi_compat.comm._names, fi_compat._records\n"
        "fi_compat._records.load_release('0.6.5'); fi_compat._records.introduced_in("
        "'flashinfer.comm', 'MoeAlltoAll')",
    ],
    ids=lambda statement: statement.splitlines()[0],
)
def test_runtime_imports_load_no_testing_kit(statement: str) -> None:
    code = f"{statement}\nimport sys\nprint(sorted(m for m in sys.modules if 'testing' in m))\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]", result.stdout


# ------------------------------------------------------------ the pytest plugin stays light

#: What loading the plugin may not import: pytest loads it (the ``pytest11`` entry point) in
#: every session of a project that installs fi-compat, and under pytest-cov it loads before
#: coverage starts, so anything it imports at start would go unmeasured in ``make test``.
PLUGIN_DEFERS = ("fi_compat._records", "fi_compat.testing._fake", "fi_compat.attention")


def test_loading_the_pytest_plugin_defers_the_records_and_the_fake() -> None:
    loaded = f"print(sorted(m for m in sys.modules if m.startswith({PLUGIN_DEFERS!r})))\n"
    code = (
        "import sys, fi_compat.testing, fi_compat.testing.pytest_plugin\n"
        "import fi_compat.testing._plugin_matrix\n"
        f"{loaded}"
        # the names still arrive on first use
        "from fi_compat.testing import fake_flashinfer, FlashInferRelease, load_release\n"
        f"{loaded}"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    before, after = result.stdout.splitlines()
    assert before == "[]", result.stdout
    assert "'fi_compat._records'" in after
    assert "'fi_compat.testing._fake'" in after
