"""MkDocs hooks: fail the build on a stale table or chart, or a Sphinx role left in a page.

The compatibility and split-reach tables, and the migration guides' fusion-policy tables,
are generated from the data fi-compat ships (``tools/doc_tables.py``) and written
into the pages by ``python scripts/gen_compat_table.py --write``. A page whose copy
drifted fails the build, so the site never shows a table that the data no longer supports.

The charts under ``docs/images/`` (the release timeline, the reach map, the benchmark
charts) are drawn from the same data by ``tools/charts.py`` (``python -m tools.charts
--write``; ``make bench`` redraws the benchmark ones). The build draws every chart again in
memory and fails when a file is missing or differs, so a picture cannot outlive its data.

Docstrings' Sphinx roles (``:class:`X```) are turned into links by ``docs/griffe_roles.py``;
a role that reaches a rendered page (a pattern the extension does not know) fails the build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

#: The repository, whose maintainer tooling (tools/) draws the tables and the charts.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.doc_tables import refresh  # noqa: E402


def on_pre_build(**_: Any) -> None:
    """Raise when a chart under ``docs/images/`` is missing or differs from its data."""
    from tools.charts import stale

    drifted = stale(ROOT)
    if drifted:
        raise PluginError(
            f"charts missing or differing from their data: {', '.join(drifted)}; "
            "run python -m tools.charts --write (make bench for the benchmark charts)"
        )


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """Return the page unchanged; raise when one of its generated tables is out of date."""
    if refresh(markdown) != markdown:
        raise PluginError(
            f"{page.file.src_uri}: a generated table differs from its data; "
            "run python scripts/gen_compat_table.py --write"
        )
    return markdown


ROLE_LEFT = re.compile(r":(?:py:)?[a-z]+:`|(?<!<code>)\.\. version(?:added|changed)::")


def on_page_content(html: str, *, page: Any, **_: Any) -> str:
    """Return the page's HTML unchanged; raise when a Sphinx role was rendered literally."""
    left = ROLE_LEFT.search(html)
    if left is not None:
        context = html[max(0, left.start() - 60) : left.end() + 60]
        raise PluginError(f"{page.file.src_uri}: a Sphinx role is shown literally: {context!r}")
    return html
