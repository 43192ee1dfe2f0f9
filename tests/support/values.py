"""Values that look like a bool or a string and are not: the hostile switches of the suite.

``bool("false")`` is True, so a switch that converts instead of refusing turns on when told
off. Needs torch and numpy (their scalar bools are among the values).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["NOT_BOOLS", "NOT_STRS"]

#: Values that are not bools but that ``bool()`` would happily convert.
NOT_BOOLS: list[object] = [
    "false",
    "False",
    "true",
    "0",
    "",
    "off",
    0,
    1,
    0.0,
    None,
    [],
    [False],
    np.bool_(False),
    np.bool_(True),
    torch.tensor(False),
]
NOT_STRS: list[object] = [None, 0, 9.0, b"9.0", ("9", "0"), ["x"]]
