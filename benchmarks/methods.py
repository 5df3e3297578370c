"""What a benchmark method provides, and how it refuses (shared by the baselines and tensorlang).

A method builds an :class:`Impl` for one workload and one data set.  ``make_primal``
and ``make_grad`` return zero-argument callables (inputs already converted to the
framework's arrays, outside the timed region); the harness times the factory plus
the first call as the compile time, checks the results against the NumPy
reference, then times further calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# the methods compared, in report order (shared by the runner and the report)
METHODS = ("tensorlang", "tensorlang-naive", "jax", "torch", "autograd", "numba-hand")


class NotAvailable(Exception):
    """The method cannot run here: a package or a compiler stage is missing."""


class NotApplicable(Exception):
    """The method has no implementation of this workload (e.g. no hand-written kernel)."""


@dataclass
class Impl:
    make_primal: Callable[[], Callable[[], object]]
    make_grad: Callable[[], Callable[[], object]]
    value: Callable[[object], float]  # primal output -> float
    grads: Callable[[object], dict]  # gradient output -> {wrt name: ndarray}
    note: object = ""  # a string, or a callable giving one after the first calls


def split_args(spec_args, data):
    """Evaluate a spec's argument list against the data dict."""
    return [a(data) if callable(a) else data[a] for a in spec_args]
