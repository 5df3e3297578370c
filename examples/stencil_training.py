"""Training loops whose loss is a tensorlang stencil: PyTorch and JAX (paper Sections 2-3: gen, sum, brackets).

Learn a 5 x 5 sharpening filter K that undoes a blur: for a batch of
blurred photograph patches X and the sharp patches Y,

    l(K) = sum[b:B] sum[j:h] sum[i:w] (sum[a:5] sum[e:5] [0 <= j+a-2 < h ∧ 0 <= i+e-2 < w]·K[a,e]·X[b, j+a-2, i+e-2] - Y[b,j,i])²

(a correlation with zero padding: the bracket keeps every read inside the
patch).  The same tensorlang program is trained twice, with the same
mini-batches and the same Adam rule:

* in PyTorch, through ``tl.torch_function(loss)`` and ``torch.optim.Adam``;
* in JAX, through ``tl.jax_function(loss)`` under ``jax.jit(jax.value_and_grad(...))``.

Both frameworks see tensorlang's compiled gradient, so the two loss curves
agree to rounding.  Run ``python examples/stencil_training.py [--steps 150]
[--framework torch|jax|both] [--out DIR]``: writes loss_curve.png and
sharp.png, blurred.png, restored.png (the whole photograph through the
learnt filter) to DIR (default ./tensorlang-out/stencil_training).
Needs ``pip install 'tensorlang[examples,torch,jax]'``.
"""

import os
import sys
import time

import numpy as np

import tensorlang as tl

S, R = 5, 2  # filter side and radius

b, h, w = tl.sizes("b h w")
X = tl.tensor("X", b, h, w)
Y = tl.tensor("Y", b, h, w)
K = tl.tensor("K", S, S)


def _tap(bb, j, i, a, e):
    inside = (j + a - R >= 0) & (j + a - R < h) & (i + e - R >= 0) & (i + e - R < w)
    return tl.iverson(inside, K[a, e] * X[bb, j + a - R, i + e - R])


filtered = tl.gen([b, h, w], lambda bb, j, i: tl.sum([S, S], lambda a, e: _tap(bb, j, i, a, e)))
loss = tl.sum([b, h, w], lambda bb, j, i: (filtered[bb, j, i] - Y[bb, j, i]) ** 2)


def correlate(img, k):
    """NumPy reference of the filter (zero padding), for the restored image and for tests."""
    H, W = img.shape[-2:]
    pad = np.pad(img, [(0, 0)] * (img.ndim - 2) + [(R, R), (R, R)])
    return sum(k[a, e] * pad[..., a:a + H, e:e + W] for a in range(S) for e in range(S))


def reference(d):
    return float(((correlate(d["X"], d["K"]) - d["Y"]) ** 2).sum())


def blur_kernel():
    t = np.arange(S) - R
    g = np.exp(-0.5 * (t / 1.2) ** 2)
    return np.outer(g, g) / np.outer(g, g).sum()


def data(size=128, patch=32, batch=8, steps=150, noise=0.01, seed=0):
    """The sharp and blurred photograph, and one list of (X, Y) mini-batches of patches per step."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

    sharp = C.photograph(size)
    rng = np.random.default_rng(seed)
    blurred = correlate(sharp, blur_kernel()) + rng.normal(scale=noise, size=sharp.shape)
    batches = []
    for _ in range(steps):
        js, is_ = rng.integers(0, size - patch + 1, size=(2, batch))
        batches.append((np.stack([blurred[j:j + patch, i:i + patch] for j, i in zip(js, is_)]),
                        np.stack([sharp[j:j + patch, i:i + patch] for j, i in zip(js, is_)])))
    return sharp, blurred, batches


def identity_filter():
    k0 = np.zeros((S, S))
    k0[R, R] = 1.0
    return k0


B1, B2, ADAM_EPS = 0.9, 0.999, 1e-8


def train_torch(batches, lr, track=None):
    import torch

    F = tl.torch_function(loss)
    k = torch.tensor(identity_filter(), requires_grad=True)
    opt = torch.optim.Adam([k], lr=lr, betas=(B1, B2), eps=ADAM_EPS)
    losses = []
    for xb, yb in batches:
        if track is not None:
            track(k.detach().numpy())
        opt.zero_grad()
        val = F(X=torch.from_numpy(xb), Y=torch.from_numpy(yb), K=k) / yb.size  # mean squared error
        val.backward()
        opt.step()
        losses.append(val.item())
    return k.detach().numpy().copy(), losses


def train_jax(batches, lr, track=None):
    import jax

    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    F = tl.jax_function(loss)

    @jax.jit
    def step(k, m1, m2, t, xb, yb):
        val, g = jax.value_and_grad(lambda kk: F(X=xb, Y=yb, K=kk) / yb.size)(k)
        m1 = B1 * m1 + (1 - B1) * g  # torch.optim.Adam's update, written out
        m2 = B2 * m2 + (1 - B2) * g * g
        step_size = lr / (1 - B1 ** t)
        denom = jnp.sqrt(m2) / jnp.sqrt(1 - B2 ** t) + ADAM_EPS
        return k - step_size * m1 / denom, m1, m2, val

    k, m1, m2 = jnp.asarray(identity_filter()), jnp.zeros((S, S)), jnp.zeros((S, S))
    losses = []
    for t, (xb, yb) in enumerate(batches, start=1):
        if track is not None:
            track(np.asarray(k))
        k, m1, m2, val = step(k, m1, m2, float(t), xb, yb)
        losses.append(float(val))
    return np.asarray(k), losses


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

    p = C.parser("stencil_training", __doc__)
    p.add_argument("--framework", choices=("torch", "jax", "both"), default="both")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--size", type=int, default=128, help="photograph side (divides 512; default 128)")
    p.add_argument("--patch", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args(argv)
    out = C.out_dir(args.out)

    sharp, blurred, batches = data(args.size, args.patch, args.batch, args.steps, seed=args.seed)
    runs = {}
    for fw in (("torch", "jax") if args.framework == "both" else (args.framework,)):
        t0 = time.perf_counter()
        full = []  # the whole photograph's error before each step (a NumPy check, not the training loss)
        k, losses = (train_torch if fw == "torch" else train_jax)(
            batches, args.lr, track=lambda kk: full.append(float(np.mean((correlate(blurred, kk) - sharp) ** 2))))
        runs[fw] = {"K": k, "losses": losses, "full": full, "seconds": time.perf_counter() - t0}
        print(f"{fw}: {args.steps} steps in {runs[fw]['seconds']:.1f} s (including kernel compilation); "
              f"mean squared error {losses[0]:.3g} -> {losses[-1]:.3g}")
    if len(runs) == 2:
        diff = max(abs(a - c) / abs(c) for a, c in zip(runs["torch"]["losses"], runs["jax"]["losses"]))
        print(f"torch and jax loss curves agree to {diff:.1e} (relative)")
    k = next(iter(runs.values()))["K"]
    restored = correlate(blurred, k)
    before, after = C.psnr(blurred, sharp), C.psnr(restored, sharp)
    print(f"PSNR of the whole photograph: blurred {before:.2f} dB -> through the learnt filter {after:.2f} dB")

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for fw, st in zip(runs, ("-", "--")):
        ax.semilogy(runs[fw]["losses"], st, lw=0.8, alpha=0.7, label=f"{fw} (tl.{fw}_function): mini-batch")
        ax.semilogy(runs[fw]["full"], st, lw=2, label=f"{fw}: whole photograph")
    ax.set_xlabel("step")
    ax.set_ylabel("mean squared error")
    ax.set_title("learning a 5x5 sharpening stencil", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss_curve.png", dpi=110)
    plt.close(fig)
    C.save_gray(out / "sharp.png", sharp)
    C.save_gray(out / "blurred.png", blurred)
    C.save_gray(out / "restored.png", restored)
    print(f"wrote loss_curve.png, sharp.png, blurred.png, restored.png to {out}")
    return {"runs": runs, "psnr_blurred": before, "psnr_restored": after, "out": out}


if __name__ == "__main__":
    main()
