"""The runnable examples (issue #18), at small sizes: they converge and are right.

Oracles: each example's NumPy reference of its loss (independent of
tensorlang), the PSNR against the clean photograph, the true signal and
kernel of the synthetic blind-deconvolution problem, torch's own conv2d
gradient, and the agreement of the PyTorch and JAX training runs.  The
examples need the ``examples`` extra (matplotlib, scipy, scikit-image); the
training example also needs torch and jax.  Kernels are compiled (the
runtime would otherwise pick the slow reference evaluator at these sizes).
"""

import importlib

import numpy as np
import pytest

import tensorlang as tl


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.setenv("TENSORLANG_RUNTIME", "compiled")


def _example(name, *needs):
    for mod in ("matplotlib", "scipy.optimize", "skimage", *needs):
        pytest.importorskip(mod)
    return importlib.import_module(f"examples.{name}")


def test_image_denoising_converges_and_denoises(tmp_path):
    ex = _example("image_denoising")
    r = ex.main(["--size", "32", "--maxiter", "200", "--out", str(tmp_path)])
    res = r["result"]
    assert res.success, res.message
    assert r["psnr_denoised"] > r["psnr_noisy"] + 2.0  # TV removes noise: measured +6.2 dB at this size
    e = np.array(r["energies"])
    assert np.all(np.diff(e) <= 1e-9 * abs(e[0])) and e[-1] < 0.9 * e[0]
    # first-order optimality, checked on the NumPy energy by central differences along random directions
    rng = np.random.default_rng(0)
    energy = lambda uu: ex.reference({"u": uu, "f": r["noisy"]})  # noqa: E731
    scale = np.linalg.norm(r["noisy"] - r["clean"])
    for _ in range(3):
        d = rng.normal(size=r["denoised"].shape)
        d /= np.linalg.norm(d)
        slope = (energy(r["denoised"] + 1e-5 * d) - energy(r["denoised"] - 1e-5 * d)) / 2e-5
        assert abs(slope) < 1e-3 * scale
    assert energy(r["denoised"]) == pytest.approx(res.fun, rel=1e-10)
    for png in ("clean", "noisy", "denoised", "convergence"):
        assert (tmp_path / f"{png}.png").stat().st_size > 1000


def test_image_denoising_energy_matches_numpy():
    ex = _example("image_denoising")
    d = ex.random_inputs(5, 7, seed=2)
    assert tl.evaluate(ex.loss, **d) == pytest.approx(ex.reference(d), rel=1e-12)


def test_blind_deconvolution_recovers_signal_and_kernel(tmp_path):
    ex = _example("blind_deconvolution")
    d = {"x": np.linspace(-1, 1, 14), "c": np.array([0.2, 0.5, 0.3, 0.1, 0.05]), "z": np.ones(10),
         "p": ex.positions(5)}
    assert tl.evaluate(ex.loss, **d) == pytest.approx(ex.reference(d), rel=1e-12)
    r = ex.main(["--n", "120", "--m", "9", "--maxiter", "400", "--out", str(tmp_path)])
    assert r["residual"] < 1.5 * 0.01  # fits the data to the noise level
    assert r["err_kernel"] < 0.2 and r["err_signal"] < 0.25
    assert r["losses"][-1] < 0.5 * r["losses"][0]  # measured 0.41: the priors keep a floor
    for png in ("signal", "kernel", "convergence"):
        assert (tmp_path / f"{png}.png").stat().st_size > 1000


def test_stencil_loss_gradient_matches_torch_conv2d():
    ex = _example("stencil_training", "torch")
    import torch

    rng = np.random.default_rng(1)
    xb, yb, k = rng.normal(size=(2, 9, 8)), rng.normal(size=(2, 9, 8)), rng.normal(size=(5, 5))
    assert tl.evaluate(ex.loss, X=xb, Y=yb, K=k) == pytest.approx(ex.reference({"X": xb, "Y": yb, "K": k}), rel=1e-12)
    kt = torch.tensor(k, requires_grad=True)
    ex_loss = tl.torch_function(ex.loss)(X=torch.tensor(xb), Y=torch.tensor(yb), K=kt)
    ex_loss.backward()
    k2 = torch.tensor(k, requires_grad=True)
    out = torch.nn.functional.conv2d(torch.tensor(xb)[:, None], k2[None, None], padding=2)[:, 0]  # a correlation
    ((out - torch.tensor(yb)) ** 2).sum().backward()
    np.testing.assert_allclose(kt.grad.numpy(), k2.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_stencil_training_torch_and_jax_agree_and_learn(tmp_path):
    ex = _example("stencil_training", "torch", "jax")
    r = ex.main(["--steps", "60", "--size", "64", "--patch", "16", "--batch", "4", "--out", str(tmp_path)])
    t, j = r["runs"]["torch"], r["runs"]["jax"]
    np.testing.assert_allclose(t["losses"], j["losses"], rtol=1e-9)
    np.testing.assert_allclose(t["K"], j["K"], rtol=1e-8, atol=1e-10)
    assert r["psnr_restored"] > r["psnr_blurred"] + 0.1  # the learnt filter sharpens the photograph (measured +0.29 dB)
    assert (tmp_path / "loss_curve.png").stat().st_size > 1000
