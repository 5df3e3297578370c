"""The benchmark workloads (issue #8), each defined once in tensorlang's API.

Intermediate tensors are let-bound (as a user writes them and as the paper's
let-lifting of Section 2.3 produces them), so the Fig. 6 cost of the program as
written is the cost of computing each intermediate once.

Every workload gives: the tensorlang program (built lazily, so importing this
module does not need any later compiler stage), its ``wrt`` inputs by name, a
deterministic data generator for a size, and an independent NumPy reference
for the loss and its gradient (derived by hand, checked against central
finite differences of the NumPy loss by the runner and by
tests/system/test_benchmarks.py).  The baselines (benchmarks/baselines/) restate the
same losses in each framework's own idiom.

Paper references: workloads 1-2 are the pathological examples of Section 1,
workload 3 is the deconvolution of Section 2.1, workload 4 the batched kernel
fit of Section 2.3; 5-8 exercise relations, predicates and black-box functions
(Sections 3-4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

# The image loss's smoothness weight and the n-body softening; constants of
# the programs, shared by every implementation.
LAMBDA = 0.1
EPS = 0.01
TRACES = 8
DENSITY = 0.05


@dataclass(frozen=True)
class Workload:
    name: str
    number: int  # the workload's number in issue #8
    title: str
    primary: str  # the size that varies along a plot's x axis
    sizes: tuple  # full-mode values of the primary size
    fixed: dict  # the other sizes, held constant
    quick: dict  # every size for --quick (tiny: the reference evaluator can run it)
    check: dict  # every size for the finite-difference check of the NumPy gradient
    wrt: tuple  # input names the gradient is taken with respect to
    program: Callable  # () -> (loss Expr, {name: Var})
    data: Callable  # (sizes: dict, rng) -> {input name: ndarray}
    loss_ref: Callable  # data -> float
    grad_ref: Callable  # data -> {name: ndarray}
    work: Callable  # sizes -> rough scalar-operation count (guards the slow evaluator)
    notes: str = ""
    tags: tuple = field(default=())
    # data -> (loss, {name: Var}, tensorlang's data, cotangents -> dense): tensorlang runs the same
    # loss on the data its peers take (benchmarks/tl_impl.py); None: the program above, as is
    tl_form: Callable | None = None

    def size_dict(self, primary_value: int) -> dict:
        return {**self.fixed, self.primary: int(primary_value)}

    def make_data(self, sizes: dict, seed: int = 0) -> dict:
        return self.data(dict(sizes), np.random.default_rng(seed))


def _tl():
    import tensorlang as tl

    return tl


# -- 1. let A = diag(x) in dot(A[:,0], A[0,:]) ---------------------------------------


@lru_cache(maxsize=None)
def _diag_dot_program():
    tl = _tl()
    N = tl.size("N")
    x = tl.tensor("x", N)
    diag = tl.gen([N, N], lambda i, j: tl.iverson(i == j, x[i]))

    def body(A):
        col0 = tl.gen(N, lambda i: A[i, 0])  # A[:, 0]
        row0 = tl.gen(N, lambda j: A[0, j])  # A[0, :]
        return tl.let(col0, lambda u: tl.let(row0, lambda v: tl.sum(N, lambda i: u[i] * v[i])))  # dot

    return tl.let(diag, body), {"x": x}


def _vector_data(sizes, rng):
    return {"x": rng.normal(size=sizes["N"])}


def _diag_dot_grad(d):
    g = np.zeros_like(d["x"])
    g[0] = 2.0 * d["x"][0]  # only A[0,0] = x[0] is on both the first row and column
    return {"x": g}


# -- 2. let A = diag(x) in trace(A) + ... + trace(A) (k = 8) -------------------------


@lru_cache(maxsize=None)
def _diag_trace_program():
    tl = _tl()
    N = tl.size("N")
    x = tl.tensor("x", N)
    diag = tl.gen([N, N], lambda i, j: tl.iverson(i == j, x[i]))

    def body(A):
        out = tl.sum(N, lambda i: A[i, i])
        for _ in range(TRACES - 1):
            out = out + tl.sum(N, lambda i: A[i, i])
        return out

    return tl.let(diag, body), {"x": x}


# -- 3. 1-D deconvolution loss (Section 2.1) ---------------------------------------------


@lru_cache(maxsize=None)
def _deconv_program():
    tl = _tl()
    n, m = tl.sizes("n m")
    x = tl.tensor("x", n + m - 1)
    c = tl.tensor("c", m)
    z = tl.tensor("z", n)
    conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.let(conv, lambda y: tl.sum(n, lambda i: (y[i] - z[i]) ** 2))
    return loss, {"x": x, "c": c, "z": z}


def _deconv_data(sizes, rng):
    n, m = sizes["n"], sizes["m"]
    return {"x": rng.normal(size=n + m - 1), "c": rng.normal(size=m) / m, "z": rng.normal(size=n)}


def _deconv_loss(d):
    y = np.convolve(d["x"], d["c"], mode="valid")  # y[i] = sum_j x[i + m-1 - j] c[j]
    return float(((y - d["z"]) ** 2).sum())


def _deconv_grad(d):
    x, c = d["x"], d["c"]
    r = 2.0 * (np.convolve(x, c, mode="valid") - d["z"])
    # dx[k] = sum_j r[k - m+1 + j] c[j]   (the transpose of a valid convolution is a full one)
    dx = np.convolve(r, c[::-1], mode="full")
    # dc[j] = sum_i r[i] x[i + m-1 - j]
    dc = np.correlate(x, r, mode="valid")[::-1].copy()
    return {"x": dx, "c": dc}


# -- 4. batched convolution kernel fitting (Section 2.3) ---------------------------------


@lru_cache(maxsize=None)
def _batched_program():
    tl = _tl()
    B, n, m = tl.sizes("B n m")
    x = tl.tensor("x", B, n + m - 1)
    z = tl.tensor("z", B, n)
    w = tl.tensor("w", m)
    loss = tl.sum(
        [B, n], lambda k, i: (tl.sum(m, lambda j: x[k, i - j + m - 1] * w[j]) - z[k, i]) ** 2
    )
    return loss, {"x": x, "z": z, "w": w}


def _batched_data(sizes, rng):
    B, n, m = sizes["B"], sizes["n"], sizes["m"]
    return {"x": rng.normal(size=(B, n + m - 1)), "z": rng.normal(size=(B, n)), "w": rng.normal(size=m) / m}


def _batched_loss(d):
    return float(sum(((np.convolve(xk, d["w"], mode="valid") - zk) ** 2).sum() for xk, zk in zip(d["x"], d["z"])))


def _batched_grad(d):
    g = np.zeros_like(d["w"])
    for xk, zk in zip(d["x"], d["z"]):
        r = 2.0 * (np.convolve(xk, d["w"], mode="valid") - zk)
        g += np.correlate(xk, r, mode="valid")[::-1]
    return {"w": g}


# -- 5. 2-D image loss: masked blur data term + Laplacian smoothness ---------------------


@lru_cache(maxsize=None)
def _image_program():
    tl = _tl()
    n = tl.size("n")
    u = tl.tensor("u", n, n)
    f = tl.tensor("f", n, n)
    M = tl.relation("M", n, n)  # observed pixels (the data term's mask)
    k = n - 2  # interior pixels (i+1, j+1)
    blur = tl.gen(
        [k, k],
        lambda i, j: 0.5 * u[i + 1, j + 1]
        + 0.125 * (u[i, j + 1] + u[i + 2, j + 1] + u[i + 1, j] + u[i + 1, j + 2]),
    )
    lap = tl.gen(
        [k, k],
        lambda i, j: u[i, j + 1] + u[i + 2, j + 1] + u[i + 1, j] + u[i + 1, j + 2] - 4.0 * u[i + 1, j + 1],
    )
    loss = tl.let(blur, lambda b: tl.let(lap, lambda L: tl.sum(
        [k, k],
        lambda i, j: tl.iverson(M(i + 1, j + 1), (b[i, j] - f[i + 1, j + 1]) ** 2) + LAMBDA * L[i, j] ** 2,
    )))
    return loss, {"u": u, "f": f}


def _image_data(sizes, rng):
    n = sizes["n"]
    return {"u": rng.normal(size=(n, n)), "f": rng.normal(size=(n, n)), "M": rng.random((n, n)) < 0.7}


def _image_parts(u):
    c = u[1:-1, 1:-1]
    nb = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
    return 0.5 * c + 0.125 * nb, nb - 4.0 * c


def _image_loss(d):
    blur, lap = _image_parts(d["u"])
    data = np.where(d["M"][1:-1, 1:-1], (blur - d["f"][1:-1, 1:-1]) ** 2, 0.0)
    return float(data.sum() + LAMBDA * (lap**2).sum())


def _image_grad(d):
    blur, lap = _image_parts(d["u"])
    r = np.where(d["M"][1:-1, 1:-1], 2.0 * (blur - d["f"][1:-1, 1:-1]), 0.0)
    s = 2.0 * LAMBDA * lap
    g = np.zeros_like(d["u"])
    # each stencil is a sum of shifted copies; its transpose adds shifted cotangents back
    g[1:-1, 1:-1] += 0.5 * r - 4.0 * s
    for sl in ((slice(None, -2), slice(1, -1)), (slice(2, None), slice(1, -1)),
               (slice(1, -1), slice(None, -2)), (slice(1, -1), slice(2, None))):
        g[sl] += 0.125 * r + s
    return {"u": g}


# -- 6. quadratic form x^T A^T A x --------------------------------------------------------


@lru_cache(maxsize=None)
def _quadform_program():
    tl = _tl()
    n = tl.size("n")
    A = tl.tensor("A", n, n)
    x = tl.tensor("x", n)
    Ax = tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[j]))
    loss = tl.let(Ax, lambda y: tl.sum(n, lambda i: y[i] * y[i]))
    return loss, {"A": A, "x": x}


def _quadform_data(sizes, rng):
    n = sizes["n"]
    return {"A": rng.normal(size=(n, n)) / np.sqrt(n), "x": rng.normal(size=n)}


def _quadform_loss(d):
    y = d["A"] @ d["x"]
    return float(y @ y)


def _quadform_grad(d):
    y = d["A"] @ d["x"]
    return {"x": 2.0 * (d["A"].T @ y), "A": 2.0 * np.outer(y, d["x"])}


# -- 7. sparse least squares through a relation ------------------------------------------


@lru_cache(maxsize=None)
def _sparse_program():
    tl = _tl()
    n = tl.size("n")
    S = tl.relation("S", n, n)  # the nonzero pattern of A
    A = tl.tensor("A", n, n)
    x = tl.tensor("x", n)
    b = tl.tensor("b", n)
    Ax = tl.gen(n, lambda i: tl.sum(n, lambda j: tl.iverson(S(i, j), A[i, j] * x[j])))
    loss = tl.let(Ax, lambda y: tl.sum(n, lambda i: (y[i] - b[i]) ** 2))
    return loss, {"A": A, "x": x, "b": b}


def _sparse_data(sizes, rng):
    n = sizes["n"]
    S = rng.random((n, n)) < DENSITY
    A = np.where(S, rng.normal(size=(n, n)), 0.0)
    return {"S": S, "A": A, "x": rng.normal(size=n), "b": rng.normal(size=n)}


@lru_cache(maxsize=None)
def _sparse_tensor_program():
    tl = _tl()
    n = tl.size("n")
    S = tl.relation("S", n, n)
    A = tl.sparse_tensor("A", S)  # a read A[i, j] means [S(i, j)] A[i, j]
    x = tl.tensor("x", n)
    b = tl.tensor("b", n)
    Ax = tl.gen(n, lambda i: tl.sum(n, lambda j: A[i, j] * x[j]))
    loss = tl.let(Ax, lambda y: tl.sum(n, lambda i: (y[i] - b[i]) ** 2))
    return loss, {"A": A, "x": x, "b": b}


def _sparse_packed(d):
    """A's values packed on S (a CSR matrix), as the peers take them"""
    import scipy.sparse as sp

    rows, cols = np.nonzero(d["S"])  # row-major: the peers' COO order
    n = d["x"].shape[0]
    A = sp.csr_matrix((d["A"][rows, cols], (rows, cols)), shape=(n, n))
    loss, ins = _sparse_tensor_program()

    def dense(g):
        return {k: v.toarray() if sp.issparse(v) else v for k, v in g.items()}

    return loss, ins, {"A": A, "x": d["x"], "b": d["b"]}, dense


def _sparse_loss(d):
    r = np.where(d["S"], d["A"], 0.0) @ d["x"] - d["b"]
    return float(r @ r)


def _sparse_grad(d):
    As = np.where(d["S"], d["A"], 0.0)
    r = 2.0 * (As @ d["x"] - d["b"])
    return {"A": np.where(d["S"], np.outer(r, d["x"]), 0.0), "x": As.T @ r}


# -- 8. n-body potential -------------------------------------------------------------------


@lru_cache(maxsize=None)
def _nbody_program():
    tl = _tl()
    n = tl.size("n")
    p = tl.tensor("p", n, 3)

    def pair(i, j):
        d2 = tl.sum(3, lambda k: (p[i, k] - p[j, k]) ** 2)
        return tl.iverson(i < j, 1.0 / tl.sqrt(d2 + EPS))

    return tl.sum([n, n], pair), {"p": p}


def _nbody_data(sizes, rng):
    return {"p": rng.uniform(-1.0, 1.0, size=(sizes["n"], 3))}


def _nbody_pairs(p):
    diff = p[:, None, :] - p[None, :, :]
    d2 = (diff**2).sum(-1) + EPS
    return diff, d2


def _nbody_loss(d):
    _, d2 = _nbody_pairs(d["p"])
    return float(np.triu(1.0 / np.sqrt(d2), k=1).sum())


def _nbody_grad(d):
    diff, d2 = _nbody_pairs(d["p"])
    w = d2**-1.5
    np.fill_diagonal(w, 0.0)
    # d/dp_i of (|p_i - p_j|^2 + eps)^(-1/2) = -(...)^(-3/2) (p_i - p_j), summed over j != i
    return {"p": -(w[:, :, None] * diff).sum(axis=1)}


# -- 9. 1-D Burgers, Engquist-Osher upwind flux (tl.maximum / tl.minimum; issue #17) ----------
#
# u_t + (u^2/2)_x = 0 by explicit steps u_i <- u_i - C (F_i - F_(i-1)) at interior points, with the
# upwind flux F_j = max(u_j, 0)^2/2 + min(u_(j+1), 0)^2/2 between points j and j+1 (its
# derivatives max(u_j, 0) and min(u_(j+1), 0) are continuous, so finite differences check it).
# BURGERS_STEPS steps are unrolled in Python (tl.loop will carry them symbolically).

BURGERS_C = 0.25  # dt/dx; |u| <= 1 keeps the CFL number <= 1/4
BURGERS_STEPS = 1  # unrolled; the audit of the naive adjoint grows steeply with more (see the report)


@lru_cache(maxsize=None)
def _burgers_program():
    tl = _tl()
    n = tl.size("n")
    u0, z = tl.tensor("u", n), tl.tensor("z", n)

    def step(u):
        flux = tl.gen(n - 1, lambda j: 0.5 * tl.maximum(u[j], 0.0) ** 2 + 0.5 * tl.minimum(u[j + 1], 0.0) ** 2)
        return tl.let(flux, lambda F: tl.gen(
            n, lambda i: u[i] - BURGERS_C * tl.iverson((i >= 1) & (i <= n - 2), F[i] - F[i - 1])))

    def run(u, k):
        if k == 0:
            return tl.sum(n, lambda i: (u[i] - z[i]) ** 2)
        return tl.let(step(u), lambda v: run(v, k - 1))

    return run(u0, BURGERS_STEPS), {"u": u0, "z": z}


def _burgers_data(sizes, rng):
    n = sizes["n"]
    xs = np.linspace(0.0, 2.0 * np.pi, n)
    return {"u": 0.8 * np.sin(xs) + rng.uniform(-0.2, 0.2, n), "z": rng.uniform(-0.5, 0.5, n)}


def _burgers_states(u):
    states = [u]
    for _ in range(BURGERS_STEPS):
        F = 0.5 * np.maximum(u[:-1], 0.0) ** 2 + 0.5 * np.minimum(u[1:], 0.0) ** 2
        u = u.copy()
        u[1:-1] -= BURGERS_C * (F[1:] - F[:-1])
        states.append(u)
    return states


def _burgers_loss(d):
    return float(((_burgers_states(d["u"])[-1] - d["z"]) ** 2).sum())


def _burgers_grad(d):
    states = _burgers_states(d["u"])
    g = 2.0 * (states[-1] - d["z"])
    for u in reversed(states[:-1]):
        # u'_i = u_i - C (F_i - F_(i-1)) for 1 <= i <= n-2: dL/dF_j = C (g_(j+1) [j+1 interior] - g_j [j interior])
        gi = g.copy()
        gi[0] = gi[-1] = 0.0
        gF = BURGERS_C * (gi[1:] - gi[:-1])
        g = g.copy()
        g[:-1] += gF * np.maximum(u[:-1], 0.0)  # dF_j/du_j
        g[1:] += gF * np.minimum(u[1:], 0.0)  # dF_j/du_(j+1)
    return {"u": g}


# -- the table -------------------------------------------------------------------------------


def _deconv(m: int, sizes: tuple) -> Workload:
    return Workload(
        name=f"deconv-m{m}", number=3, title=f"1-D deconvolution loss, m = {m} (grad in x and c)",
        primary="n", sizes=sizes, fixed={"m": m},
        quick={"n": 64, "m": m}, check={"n": 24, "m": min(m, 5)},
        wrt=("x", "c"), program=_deconv_program, data=_deconv_data,
        loss_ref=_deconv_loss, grad_ref=_deconv_grad, work=lambda s: s["n"] * s["m"],
    )


WORKLOADS: tuple = (
    Workload(
        name="diag-dot", number=1, title="let A = diag(x) in dot(A[:,0], A[0,:])",
        primary="N", sizes=(1000, 2000, 4000, 8000, 16000), fixed={},
        quick={"N": 48}, check={"N": 8}, wrt=("x",), program=_diag_dot_program, data=_vector_data,
        loss_ref=lambda d: float(d["x"][0] ** 2), grad_ref=_diag_dot_grad, work=lambda s: s["N"] ** 2,
    ),
    Workload(
        name="diag-trace", number=2, title=f"let A = diag(x) in trace(A) + ... + trace(A) (k = {TRACES})",
        primary="N", sizes=(1000, 2000, 4000, 8000, 16000), fixed={},
        quick={"N": 48}, check={"N": 8}, wrt=("x",), program=_diag_trace_program, data=_vector_data,
        loss_ref=lambda d: float(TRACES * d["x"].sum()),
        grad_ref=lambda d: {"x": np.full_like(d["x"], float(TRACES))}, work=lambda s: s["N"] ** 2,
    ),
    _deconv(3, (10_000, 100_000, 1_000_000, 4_000_000)),
    _deconv(16, (10_000, 100_000, 1_000_000, 4_000_000)),
    _deconv(64, (10_000, 100_000, 1_000_000)),
    Workload(
        name="batched-conv", number=4, title="batched convolution kernel fit, B = 32 signals (grad in w)",
        primary="n", sizes=(1000, 4000, 16_000, 64_000), fixed={"B": 32, "m": 16},
        quick={"B": 4, "n": 32, "m": 8}, check={"B": 3, "n": 12, "m": 4}, wrt=("w",),
        program=_batched_program, data=_batched_data, loss_ref=_batched_loss, grad_ref=_batched_grad,
        work=lambda s: s["B"] * s["n"] * s["m"],
    ),
    Workload(
        name="image", number=5,
        title=f"n x n image: masked blur data term + {LAMBDA} Laplacian^2 (relation M)",
        primary="n", sizes=(256, 512, 1024, 2048), fixed={},
        quick={"n": 24}, check={"n": 7}, wrt=("u",), program=_image_program, data=_image_data,
        loss_ref=_image_loss, grad_ref=_image_grad, work=lambda s: 12 * s["n"] ** 2,
    ),
    Workload(
        name="quadform", number=6, title="quadratic form x^T A^T A x (grad in x and A)",
        primary="n", sizes=(250, 500, 1000, 2000, 4000), fixed={},
        quick={"n": 24}, check={"n": 6}, wrt=("x", "A"), program=_quadform_program, data=_quadform_data,
        loss_ref=_quadform_loss, grad_ref=_quadform_grad, work=lambda s: 2 * s["n"] ** 2,
    ),
    Workload(
        name="sparse", number=7,
        title=f"sum_i ((A x)_i - b_i)^2, A n x n with {DENSITY:.0%} nonzeros (relation S; grad in x and A)",
        primary="n", sizes=(1000, 2000, 4000, 8000), fixed={},
        quick={"n": 32}, check={"n": 8}, wrt=("x", "A"), program=_sparse_program, data=_sparse_data,
        loss_ref=_sparse_loss, grad_ref=_sparse_grad, work=lambda s: s["n"] ** 2,
        notes="every method takes A's values packed on S (built once, outside the timing); "
              "tensorlang through tl.sparse_tensor", tl_form=_sparse_packed,
    ),
    Workload(
        name="nbody", number=8, title=f"n-body potential sum_(i<j) 1/sqrt(|p_i - p_j|^2 + {EPS}) (grad = -forces)",
        primary="n", sizes=(250, 500, 1000, 2000, 4000), fixed={},
        quick={"n": 24}, check={"n": 6}, wrt=("p",), program=_nbody_program, data=_nbody_data,
        loss_ref=_nbody_loss, grad_ref=_nbody_grad, work=lambda s: 10 * s["n"] ** 2,
    ),
    Workload(
        name="burgers", number=9,
        title=f"1-D Burgers, {BURGERS_STEPS} explicit steps, upwind flux with tl.maximum/tl.minimum (grad in u0)",
        primary="n", sizes=(10_000, 100_000, 1_000_000), fixed={},
        quick={"n": 32}, check={"n": 9}, wrt=("u",), program=_burgers_program, data=_burgers_data,
        loss_ref=_burgers_loss, grad_ref=_burgers_grad, work=lambda s: 12 * BURGERS_STEPS * s["n"],
        notes="issue #17: value conditionals in a time-stepping loss", tags=("conditionals",),
    ),
)

from .heat import workload_fields as _heat; WORKLOADS += (Workload(**_heat()),)  # issue #17: tl.loop heat equation
from .wave import workload_fields as _wave; WORKLOADS += (Workload(**_wave()),)  # issue #17: tl.loop wave equation (pair state)
from .burgers_loop import workload_fields as _burgers_loop; WORKLOADS += (Workload(**_burgers_loop()),)  # issue #17: tl.loop Burgers, tl.maximum upwind flux
from .dense import workload_fields as _dense; WORKLOADS += tuple(Workload(**f) for f in _dense())  # issue #13 item 6: MLP, logistic regression (BLAS)
BY_NAME = {w.name: w for w in WORKLOADS}
STANDALONE = {"sparse-tensors": "benchmarks.sparse_bench"}  # issue 16: scipy.sparse inputs, own runner (python -m benchmarks.sparse_bench)


def select(only: list | None) -> list:
    """Workloads whose name equals or starts with one of ``only`` (or whose number is given)."""
    if not only:
        return list(WORKLOADS)
    out = []
    for w in WORKLOADS:
        for key in only:
            if w.name == key or w.name.startswith(key + "-") or w.name.startswith(key) or str(w.number) == key:
                out.append(w)
                break
    if not out:
        raise SystemExit(f"no workload matches {only}; known: {', '.join(BY_NAME)}")
    return out


def finite_difference_check(w: Workload, sizes: dict | None = None, seed: int = 1, probes: int = 6,
                            h: float = 1e-6) -> float:
    """Max relative error of the NumPy gradient against central differences of the NumPy loss.

    Probes a few random coordinates of every wrt input at the small check size.
    """
    d = w.make_data(sizes or w.check, seed)
    g = w.grad_ref(d)
    rng = np.random.default_rng(seed + 1)
    worst = 0.0
    for name in w.wrt:
        arr = d[name]
        flat_idx = rng.choice(arr.size, size=min(probes, arr.size), replace=False)
        if name == "A" and "S" in d:  # probe the pattern too, where the gradient is nonzero
            nz = np.flatnonzero(d["S"])
            if nz.size:
                flat_idx = np.concatenate([flat_idx, rng.choice(nz, size=min(probes, nz.size), replace=False)])
        for fi in flat_idx:
            idx = np.unravel_index(fi, arr.shape)
            old = arr[idx]
            arr[idx] = old + h
            fp = w.loss_ref(d)
            arr[idx] = old - h
            fm = w.loss_ref(d)
            arr[idx] = old
            fd = (fp - fm) / (2 * h)
            scale = max(1.0, float(np.abs(g[name]).max()))
            worst = max(worst, abs(fd - g[name][idx]) / scale)
    return worst
