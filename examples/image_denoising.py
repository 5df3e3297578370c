"""Total-variation denoising of a real photograph (a 2D stencil with boundaries; paper Sections 3-4).

    E(u) = ½ · sum[j:h] sum[i:w] (u[j,i] - f[j,i])²
         + λ · sum[j:h] sum[i:w] sqrt(dx[j,i]² + dy[j,i]² + ε²)
    dx[j,i] = [i + 1 < w]·(u[j,i+1] - u[j,i]),   dy[j,i] = [j + 1 < h]·(u[j+1,i] - u[j,i])

The Rudin-Osher-Fatemi energy with the total variation smoothed by ε (so
that it is differentiable); the boundary is an Iverson bracket, so
``u[j, i + 1]`` is read only where ``i + 1 < w``.  ``f`` is scikit-image's
``camera`` photograph (shipped inside the scikit-image wheel: nothing is
downloaded) plus Gaussian noise; ``u`` is found by L-BFGS
(``scipy.optimize.minimize``) through ``tl.scipy_objective``, which gives
SciPy the energy and its gradient from one compiled tensorlang kernel call.

Run ``python examples/image_denoising.py [--size 256] [--out DIR]``: writes
clean.png, noisy.png, denoised.png and convergence.png (energy versus
L-BFGS iteration) to DIR (default ./tensorlang-out/image_denoising) and
prints the PSNR before and after.  Needs ``pip install 'tensorlang[examples]'``.
"""

import os
import sys
import time

import numpy as np

import tensorlang as tl

LAMBDA = 0.08   # weight of the total variation (for noise of standard deviation 0.1 on [0, 1])
EPS = 0.01      # smoothing of |∇u|: below ε the TV term is quadratic

h, w = tl.sizes("h w")
u = tl.tensor("u", h, w)
f = tl.tensor("f", h, w)


def make_loss(lam=LAMBDA, eps=EPS):
    def dx(j, i):
        return tl.iverson(i + 1 < w, u[j, i + 1] - u[j, i])

    def dy(j, i):
        return tl.iverson(j + 1 < h, u[j + 1, i] - u[j, i])

    data_term = tl.sum([h, w], lambda j, i: (u[j, i] - f[j, i]) ** 2)
    tv = tl.sum([h, w], lambda j, i: tl.sqrt(dx(j, i) ** 2 + dy(j, i) ** 2 + eps * eps))
    return 0.5 * data_term + lam * tv


loss = make_loss()


def random_inputs(H=32, W=48, seed=0):
    rng = np.random.default_rng(seed)
    return {"u": rng.normal(size=(H, W)), "f": rng.normal(size=(H, W))}


def reference(data, lam=LAMBDA, eps=EPS):
    """The energy in NumPy (an independent implementation, for tests)."""
    uv, fv = data["u"], data["f"]
    dx = np.zeros_like(uv)
    dy = np.zeros_like(uv)
    dx[:, :-1] = np.diff(uv, axis=1)
    dy[:-1, :] = np.diff(uv, axis=0)
    return float(0.5 * ((uv - fv) ** 2).sum() + lam * np.sqrt(dx ** 2 + dy ** 2 + eps * eps).sum())


def denoise(noisy, lam=LAMBDA, eps=EPS, maxiter=300):
    """Minimise E(u) for the data ``noisy`` with L-BFGS from u = f; returns (u, scipy result, energies)."""
    from scipy.optimize import minimize

    obj = tl.scipy_objective(make_loss(lam, eps), wrt=u, f=noisy)
    x0 = obj.x0(u=noisy)
    energies = [obj(x0)[0]]

    def record(intermediate_result):  # scipy >= 1.11 passes the iterate's energy
        energies.append(float(intermediate_result.fun))

    res = minimize(obj, x0, jac=True, method="L-BFGS-B", callback=record,
                   options={"maxiter": maxiter, "gtol": 1e-6})
    return obj.unflatten(res.x)["u"], res, energies


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

    p = C.parser("image_denoising", __doc__)
    p.add_argument("--size", type=int, default=256, help="image side (divides 512; default 256)")
    p.add_argument("--noise", type=float, default=0.1, help="standard deviation of the noise (default 0.1)")
    p.add_argument("--lam", type=float, default=LAMBDA)
    p.add_argument("--maxiter", type=int, default=300)
    args = p.parse_args(argv)
    out = C.out_dir(args.out)

    clean = C.photograph(args.size)
    noisy = clean + np.random.default_rng(args.seed).normal(scale=args.noise, size=clean.shape)
    t0 = time.perf_counter()
    den, res, energies = denoise(noisy, lam=args.lam, maxiter=args.maxiter)
    elapsed = time.perf_counter() - t0
    before, after = C.psnr(noisy, clean), C.psnr(den, clean)
    print(f"{args.size}x{args.size} camera photograph, noise sigma {args.noise}: L-BFGS {res.nit} iterations, "
          f"{res.nfev} energy+gradient evaluations, {elapsed:.1f} s (including kernel compilation)")
    print(f"energy {energies[0]:.6g} -> {res.fun:.6g}; PSNR noisy {before:.2f} dB -> denoised {after:.2f} dB")

    C.save_gray(out / "clean.png", clean)
    C.save_gray(out / "noisy.png", noisy)
    C.save_gray(out / "denoised.png", den)
    plt = C.pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    it = np.arange(len(energies))
    ax.plot(it, energies, "o-", ms=2)
    ax.set_ylabel("energy E(u)")
    gap = np.asarray(energies) - min(energies)
    ax2.semilogy(it[gap > 0], gap[gap > 0], "o-", ms=2)
    ax2.set_ylabel("E(u) - final E")
    for a in (ax, ax2):
        a.set_xlabel("L-BFGS iteration")
        a.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"TV denoising of a {args.size}x{args.size} photograph, λ = {args.lam}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "convergence.png", dpi=110)
    plt.close(fig)
    print(f"wrote clean.png, noisy.png, denoised.png, convergence.png to {out}")
    return {"clean": clean, "noisy": noisy, "denoised": den, "result": res, "energies": energies,
            "psnr_noisy": before, "psnr_denoised": after, "seconds": elapsed, "out": out}


if __name__ == "__main__":
    main()
