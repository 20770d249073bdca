"""Shared by the SWE-rebench test modules: which awk implementations this machine has."""

from __future__ import annotations

import shutil

import pytest

_CANDIDATES = (("mawk",), ("gawk",), ("busybox", "awk"))

AWKS: list[tuple[str, ...]] = [a for a in _CANDIDATES if shutil.which(a[0])] or [("awk",)]
"""Every awk grade.awk must agree under; CI installs all three (see ./dev)."""

awk_params = pytest.mark.parametrize("awk", AWKS, ids=[a[0] for a in AWKS])
