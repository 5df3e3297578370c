"""Blind 1D deconvolution: recover both a signal x and the blur kernel c from z ≈ x * c (paper Section 2.1).

    l(x, c) = sum[i:n] (sum[j:m] x[i - j + m - 1]·c[j] - z[i])²                   (data: a valid convolution)
            + α · sum[i:n+m-1] sqrt([i + 1 < n + m - 1]·(x[i+1] - x[i])² + ε²)      (smoothed TV: x is piecewise constant)
            + β · (sum[j:m] c[j] - 1)²                                                (the kernel keeps the mean)
            + β · (sum[j:m] p[j]·c[j])²                                               (and is centred: p[j] = j - (m-1)/2)
            + γ · sum[j:m] c[j]²                                                      (and spread out)

Blind deconvolution is bilinear in (x, c): the TV prior and the unit-sum
term remove the scale ambiguity, the centring term the shift ambiguity
(x shifted one way, c the other), the kernel's squared norm keeps it from
collapsing to the trivial "no blur" solution (c a spike, x = z), and the kernel is kept non-negative by
L-BFGS-B's bounds.  ``tl.scipy_objective(loss, wrt=[x, c], z=...)`` flattens
both unknowns into one vector for SciPy and gives back the energy and both
gradients from one tensorlang kernel call per evaluation.

Run ``python examples/blind_deconvolution.py [--n 200] [--m 15] [--out DIR]``:
writes signal.png, kernel.png and convergence.png to DIR (default
./tensorlang-out/blind_deconvolution) and prints the recovery errors.
Needs ``pip install 'tensorlang[examples]'``.
"""

import os
import sys
import time

import numpy as np

import tensorlang as tl

ALPHA, BETA, GAMMA, EPS = 0.02, 10.0, 1.0, 1e-3

n, m = tl.sizes("n m")
x = tl.tensor("x", n + m - 1)
c = tl.tensor("c", m)
z = tl.tensor("z", n)
p = tl.tensor("p", m)  # kernel tap positions j - (m - 1)/2 (data: an index is not a real in the language)

conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
data_term = tl.sum(n, lambda i: (conv[i] - z[i]) ** 2)
tv = tl.sum(n + m - 1, lambda i: tl.sqrt(tl.iverson(i + 1 < n + m - 1, (x[i + 1] - x[i]) ** 2) + EPS * EPS))
unit_sum = (tl.sum(m, lambda j: c[j]) - 1.0) ** 2
centroid = tl.sum(m, lambda j: p[j] * c[j]) ** 2
spread = tl.sum(m, lambda j: c[j] * c[j])
loss = data_term + ALPHA * tv + BETA * unit_sum + BETA * centroid + GAMMA * spread


def positions(M):
    return np.arange(M) - (M - 1) / 2


def reference(d):
    """The loss in NumPy (an independent implementation, for tests)."""
    r = np.convolve(d["x"], d["c"], mode="valid") - d["z"]
    return float((r ** 2).sum() + ALPHA * np.sqrt(np.diff(d["x"]) ** 2 + EPS * EPS).sum()
                 + ALPHA * EPS + BETA * (d["c"].sum() - 1.0) ** 2 + BETA * (d["p"] @ d["c"]) ** 2
                 + GAMMA * (d["c"] ** 2).sum())


def problem(N=200, M=15, noise=0.01, seed=0):
    """A piecewise-constant signal, an asymmetric blur kernel (sum 1) and the noisy blurred observation."""
    rng = np.random.default_rng(seed)
    L = N + M - 1
    edges = np.sort(rng.choice(np.arange(10, L - 10), size=8, replace=False))
    levels = rng.uniform(-1, 1, size=len(edges) + 1)
    signal = levels[np.searchsorted(edges, np.arange(L), side="right")]
    t = positions(M)
    shift = 0.0
    for _ in range(5):  # an asymmetric kernel, shifted so that its centroid is the middle tap
        kernel = np.exp(-0.5 * ((t + shift) / (M / 8)) ** 2) + 0.5 * np.exp(-0.5 * ((t + shift - M / 5) / (M / 10)) ** 2)
        kernel /= kernel.sum()
        shift += kernel @ t
    z_obs = np.convolve(signal, kernel, mode="valid") + rng.normal(scale=noise, size=N)
    return signal, kernel, z_obs


def solve(z_obs, M, maxiter=600):
    """Fit x and c by L-BFGS-B from x = z (edge-padded) and a wide Gaussian kernel; returns (x, c, result, losses)."""
    from scipy.optimize import minimize

    obj = tl.scipy_objective(loss, wrt=[x, c], z=z_obs, p=positions(M))
    pad = (M - 1) // 2
    x0 = np.pad(z_obs, (M - 1 - pad, pad), mode="edge")
    c0 = np.exp(-0.5 * (positions(M) / (M / 6)) ** 2)
    v0 = obj.x0(x=x0, c=c0 / c0.sum())
    bounds = [(None, None)] * x0.size + [(0.0, None)] * M  # c >= 0
    losses = [obj(v0)[0]]
    res = minimize(obj, v0, jac=True, method="L-BFGS-B", bounds=bounds,
                   callback=lambda intermediate_result: losses.append(float(intermediate_result.fun)),
                   options={"maxiter": maxiter, "maxfun": 2 * maxiter, "ftol": 1e-14, "gtol": 1e-9})
    sol = obj.unflatten(res.x)
    return sol["x"], sol["c"], res, losses


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

    p = C.parser("blind_deconvolution", __doc__)
    p.add_argument("--n", type=int, default=200, help="length of the observation (default 200)")
    p.add_argument("--m", type=int, default=15, help="length of the kernel (default 15)")
    p.add_argument("--noise", type=float, default=0.01)
    p.add_argument("--maxiter", type=int, default=600)
    args = p.parse_args(argv)
    out = C.out_dir(args.out)

    signal, kernel, z_obs = problem(args.n, args.m, args.noise, args.seed)
    t0 = time.perf_counter()
    xs, cs, res, losses = solve(z_obs, args.m, args.maxiter)
    elapsed = time.perf_counter() - t0
    err_x = float(np.linalg.norm(xs - signal) / np.linalg.norm(signal))
    err_c = float(np.linalg.norm(cs - kernel) / np.linalg.norm(kernel))
    resid = float(np.sqrt(np.mean((np.convolve(xs, cs, mode="valid") - z_obs) ** 2)))
    print(f"n={args.n}, m={args.m}: L-BFGS-B {res.nit} iterations, {res.nfev} evaluations, {elapsed:.1f} s "
          "(including kernel compilation)")
    print(f"relative error: signal {err_x:.3f}, kernel {err_c:.3f}; residual rms {resid:.4f} "
          f"(noise {args.noise})")

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(z_obs, color="0.6", lw=1, label="observed z (blurred, noisy)")
    mid = slice((args.m - 1) // 2, (args.m - 1) // 2 + args.n)  # z[i] is centred on x[i + (m-1)/2]
    ax.plot(signal[mid], "k-", lw=1.5, label="true signal")
    ax.plot(xs[mid], "C3--", lw=1.2, label="recovered signal")
    ax.legend(fontsize=8)
    ax.set_title("blind deconvolution: signal", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "signal.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(kernel, "ko-", ms=3, label="true kernel")
    ax.plot(cs, "C3s--", ms=3, label="recovered kernel")
    ax.legend(fontsize=8)
    ax.set_title("blind deconvolution: kernel", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "kernel.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.semilogy(losses, lw=1)
    ax.set_xlabel("L-BFGS-B iteration")
    ax.set_ylabel("loss")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "convergence.png", dpi=110)
    plt.close(fig)
    print(f"wrote signal.png, kernel.png, convergence.png to {out}")
    return {"signal": signal, "kernel": kernel, "x": xs, "c": cs, "result": res, "losses": losses,
            "err_signal": err_x, "err_kernel": err_c, "residual": resid, "seconds": elapsed, "out": out}


if __name__ == "__main__":
    main()
