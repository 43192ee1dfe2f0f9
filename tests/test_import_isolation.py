"""Importing fi-compat, and using what needs no backend, loads neither torch nor FlashInfer.

The one place this promise is tested: every public module and the calls that must stay
light (the lazy names of the top-level package, the comm drop-in names, the recorded
releases of the testing kit, the span checks of the planner, the policy).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "flashinfer", "numpy")


@pytest.mark.parametrize(
    "statement",
    [
        "import fi_compat",
        "import fi_compat; fi_compat.get_capabilities; fi_compat.FiCompatError",
        "import fi_compat.capabilities, fi_compat.errors, fi_compat.determinism",
        "import fi_compat.report, fi_compat.hazards, fi_compat.cli",
        "import fi_compat.policy; fi_compat.policy.decide_fusion",
        "import fi_compat.comm",
        "import fi_compat.comm as c; c.AllReduceFusionPattern.kARResidualRMSNorm; dir(c)",
        "from fi_compat.comm import create_workspace, allreduce_residual_rmsnorm",
        "from fi_compat.comm import create_allreduce_fusion_workspace, allreduce_fusion",
        "import fi_compat.comm as c, fi_compat.comm.mnnvl as m\n"
        "assert not hasattr(c, '__wrapped__') and not hasattr(m, '_private'); dir(m)",
        "from fi_compat.comm import *",
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
