"""MkDocs hook: fail the build when a page's generated table differs from the recorded data.

The compatibility and split-reach tables are generated from the data fi-compat ships
(``fi_compat.testing._table``) and written into the pages by
``python scripts/gen_compat_table.py --write``. A page whose copy drifted fails the build,
so the site never shows a table that the data no longer supports.
"""

from __future__ import annotations

from typing import Any

from mkdocs.exceptions import PluginError

from fi_compat.testing._table import refresh


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """Return the page unchanged; raise when one of its generated tables is out of date."""
    if refresh(markdown) != markdown:
        raise PluginError(
            f"{page.file.src_uri}: a generated table differs from the recorded data; "
            "run python scripts/gen_compat_table.py --write"
        )
    return markdown
