"""Helpers shared by the framework baselines (no framework imports here)."""

from __future__ import annotations

import numpy as np


def family(workload_name: str) -> str:
    """The workload family a baseline implements: deconv-m16 -> deconv."""
    return "deconv" if workload_name.startswith("deconv-m") else workload_name


def coo(data: dict):
    """The sparse workload's pattern as coordinate rows (row-major order) and values."""
    rows, cols = np.nonzero(data["S"])
    return rows.astype(np.int64), cols.astype(np.int64), data["A"][rows, cols]


def dense_from_coo(shape, rows, cols, vals) -> np.ndarray:
    out = np.zeros(shape)
    out[rows, cols] = vals
    return out
