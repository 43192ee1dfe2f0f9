"""Importing fi-compat must load neither torch nor FlashInfer."""

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
    ],
)
def test_import_loads_no_backend(statement: str) -> None:
    code = (
        f"{statement}\n"
        "import sys\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_public_names_resolve() -> None:
    import fi_compat

    for name in fi_compat.__all__:
        assert getattr(fi_compat, name) is not None
    assert set(fi_compat.__all__) <= set(dir(fi_compat))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = fi_compat.nope  # type: ignore[attr-defined]
