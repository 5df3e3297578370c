"""tl.jax_function, tl.torch_function, tl.scipy_objective (issue #18).

Oracles: each framework's own autodiff of the same loss written in its own
array language (jax.numpy, torch), torch.autograd.gradcheck (finite
differences), tensorlang's own tl.grad / tl.vjp, and NumPy's linear solve for
the minimiser of a quadratic.  Tests needing jax or torch skip when the
framework is not installed.

float32 tolerance: float32 results are compared with the float64 ones at
rtol 1e-4 (a float32 kernel rounds each of the O(10) operations per output
element at 6e-8; the sums here have at most a few hundred terms).
"""

import sys

import numpy as np
import pytest

import tensorlang as tl

F32_RTOL = 1e-4

# ---------------------------------------------------------------------------
# programs: a 1D valid convolution loss and a 2D stencil (smoothed TV) energy

n, m = tl.sizes("n m")
x = tl.tensor("x", n + m - 1)
c = tl.tensor("c", m)
z = tl.tensor("z", n)
conv = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
deconv_loss = tl.sum(n, lambda i: (conv[i] - z[i]) ** 2)

h, w = tl.sizes("h w")
u = tl.tensor("u", h, w)
f = tl.tensor("f", h, w)
EPS = 0.1


def _dx(j, i):
    return tl.iverson(i + 1 < w, u[j, i + 1] - u[j, i])


def _dy(j, i):
    return tl.iverson(j + 1 < h, u[j + 1, i] - u[j, i])


tv_loss = (0.5 * tl.sum([h, w], lambda j, i: (u[j, i] - f[j, i]) ** 2)
           + 0.3 * tl.sum([h, w], lambda j, i: tl.sqrt(_dx(j, i) ** 2 + _dy(j, i) ** 2 + EPS)))


def deconv_data(N=10, M=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=N + M - 1), "c": rng.normal(size=M), "z": rng.normal(size=N)}


def tv_data(H=5, W=6, seed=1):
    rng = np.random.default_rng(seed)
    return {"u": rng.normal(size=(H, W)), "f": rng.normal(size=(H, W))}


def tv_in(xp, U, F):
    """The same energy in an array language (jax.numpy or torch)."""
    dx = xp.concatenate([U[:, 1:] - U[:, :-1], U[:, :1] * 0], axis=1) if xp.__name__ != "torch" else \
        xp.cat([U[:, 1:] - U[:, :-1], U[:, :1] * 0], dim=1)
    dy = xp.concatenate([U[1:, :] - U[:-1, :], U[:1, :] * 0], axis=0) if xp.__name__ != "torch" else \
        xp.cat([U[1:, :] - U[:-1, :], U[:1, :] * 0], dim=0)
    return 0.5 * ((U - F) ** 2).sum() + 0.3 * xp.sqrt(dx ** 2 + dy ** 2 + EPS).sum()


# ---------------------------------------------------------------------------
# JAX


def test_jax_grad_matches_tensorlang_and_jax_numpy(jax64):
    jax, jnp = jax64, jax64.numpy
    d = tv_data()
    F = tl.jax_function(tv_loss)
    assert F.input_names == ("f", "u")
    ours = tl.grad(tv_loss, wrt=u)(**d)
    ref = jax.grad(lambda U: tv_in(jnp, U, d["f"]))(d["u"])
    for grad_fn in (jax.grad(lambda U: F(u=U, f=d["f"])), jax.jit(jax.grad(lambda U: F(u=U, f=d["f"])))):
        g = np.asarray(grad_fn(d["u"]))
        np.testing.assert_allclose(g, ours, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, np.asarray(ref), rtol=1e-10, atol=1e-12)
    assert float(jax.jit(F)(d["f"], d["u"])) == pytest.approx(float(tv_in(jnp, d["u"], d["f"])), rel=1e-12)


def test_jax_grad_with_respect_to_every_input_and_a_cotangent_scale(jax64):
    jax, jnp = jax64, jax64.numpy
    d = deconv_data()
    F = tl.jax_function(deconv_loss, inputs=[x, c, z])
    gx, gc, gz = jax.jit(jax.grad(lambda *a: 3.0 * F(*a), argnums=(0, 1, 2)))(d["x"], d["c"], d["z"])
    ref = jax.grad(lambda X, C, Z: 3.0 * jnp.sum((jnp.convolve(X, C, mode="valid") - Z) ** 2),
                   argnums=(0, 1, 2))(d["x"], d["c"], d["z"])
    for got, want in zip((gx, gc, gz), ref):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def test_jax_vjp_of_a_tensor_output_matches_tl_vjp_and_jax(jax64):
    jax, jnp = jax64, jax64.numpy
    d = deconv_data(N=9, M=4, seed=3)
    F = tl.jax_function(conv, inputs=["x", "c"])
    y, pullback = jax.vjp(F, d["x"], d["c"])
    np.testing.assert_allclose(np.asarray(y), np.convolve(d["x"], d["c"], "valid"), rtol=1e-12)
    dy = np.random.default_rng(4).normal(size=y.shape)
    gx, gc = pullback(jnp.asarray(dy))
    ours = tl.vjp(conv, wrt=[x, c])(x=d["x"], c=d["c"], dy=dy)
    ref = jax.vjp(lambda X, C: jnp.convolve(X, C, mode="valid"), d["x"], d["c"])[1](jnp.asarray(dy))
    for got, a, b in zip((gx, gc), ours, ref):
        np.testing.assert_allclose(np.asarray(got), a, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(got), np.asarray(b), rtol=1e-10, atol=1e-12)
    # under jit, through a function of the output
    g = jax.jit(jax.grad(lambda X: jnp.sum(jnp.sin(F(X, d["c"])))))(d["x"])
    ref = jax.grad(lambda X: jnp.sum(jnp.sin(jnp.convolve(X, d["c"], mode="valid"))))(d["x"])
    np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-10, atol=1e-12)


def test_jax_float32_inputs_give_float32_results():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    d = tv_data()
    d32 = {k: v.astype(np.float32) for k, v in d.items()}
    F = tl.jax_function(tv_loss)
    val = jax.jit(F)(**d32)
    g = jax.jit(jax.grad(lambda U: F(u=U, f=d32["f"])))(d32["u"])
    assert val.dtype == jnp.float32 and g.dtype == jnp.float32
    assert float(val) == pytest.approx(tl.evaluate(tv_loss, **d), rel=F32_RTOL)
    np.testing.assert_allclose(np.asarray(g), tl.grad(tv_loss, wrt=u)(**d), rtol=F32_RTOL, atol=F32_RTOL)


def test_jax_function_refuses_bad_arguments(jax64):
    F = tl.jax_function(deconv_loss)
    d = deconv_data()
    with pytest.raises(tl.InputError, match="missing argument"):
        F(x=d["x"], c=d["c"])
    with pytest.raises(tl.InputError, match="unknown argument 'q'"):
        F(q=1.0, **d)
    with pytest.raises(tl.InputError, match="input x"):
        F(x=d["x"][:-1], c=d["c"], z=d["z"])  # no size n fits both x and z
    with pytest.raises(tl.TensorLangError, match="tl.proj"):
        tl.jax_function(tl.pair(deconv_loss, deconv_loss))
    with pytest.raises(tl.InputError, match="not inputs of the program"):
        tl.jax_function(deconv_loss, inputs=["x", "c", "q"])


# ---------------------------------------------------------------------------
# PyTorch


def test_torch_gradcheck_on_a_stencil_loss_in_float64():
    torch = pytest.importorskip("torch")
    d = tv_data(H=4, W=5)
    F = tl.torch_function(tv_loss)
    U = torch.tensor(d["u"], requires_grad=True)
    Fd = torch.tensor(d["f"], requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: F(u=a, f=b), (U, Fd), eps=1e-6, atol=1e-6)
    # and against torch's own autodiff of the same energy
    val = F(u=U, f=Fd)
    val.backward()
    U2 = torch.tensor(d["u"], requires_grad=True)
    tv_in(torch, U2, torch.tensor(d["f"])).backward()
    np.testing.assert_allclose(U.grad.numpy(), U2.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert val.dtype == torch.float64 and val.shape == ()


def test_torch_gradcheck_on_a_tensor_output():
    torch = pytest.importorskip("torch")
    d = deconv_data(N=7, M=3, seed=5)
    F = tl.torch_function(conv, inputs=[x, c])
    X = torch.tensor(d["x"], requires_grad=True)
    C = torch.tensor(d["c"], requires_grad=True)
    assert torch.autograd.gradcheck(F, (X, C), eps=1e-6, atol=1e-6)
    y = F(X, C)
    np.testing.assert_allclose(y.detach().numpy(), np.convolve(d["x"], d["c"], "valid"), rtol=1e-12)


def test_torch_only_needed_gradients_and_float32():
    torch = pytest.importorskip("torch")
    d = deconv_data()
    F = tl.torch_function(deconv_loss)
    X = torch.tensor(d["x"], dtype=torch.float32, requires_grad=True)
    C = torch.tensor(d["c"], dtype=torch.float32)
    Z = torch.tensor(d["z"], dtype=torch.float32)
    val = F(x=X, c=C, z=Z)
    assert val.dtype == torch.float32
    (2.0 * val).backward()
    assert X.grad.dtype == torch.float32 and C.grad is None
    want = 2.0 * tl.grad(deconv_loss, wrt=x)(**d)
    np.testing.assert_allclose(X.grad.numpy(), want, rtol=F32_RTOL, atol=F32_RTOL)
    # a non-contiguous input (a strided view) is read in place, and gives the same value
    big = torch.tensor(np.repeat(d["x"], 2))
    assert F(x=big[::2], c=torch.tensor(d["c"]), z=torch.tensor(d["z"])).item() == pytest.approx(tl.evaluate(deconv_loss, **d), rel=1e-12)


def test_torch_bfloat16_inputs_are_widened_not_a_crash():
    """NumPy has no bfloat16: ``Tensor.numpy()`` raised a TypeError from inside the wrapper
    (session 12's hunt).  bfloat16 values, dense or a sparse tensor's, are widened exactly and
    computed in float64, as float16 ones are; each gradient comes back in its input's dtype."""
    torch = pytest.importorskip("torch")
    import scipy.sparse as sp

    d = deconv_data()
    F = tl.torch_function(deconv_loss)
    X = torch.tensor(d["x"], dtype=torch.bfloat16, requires_grad=True)
    C, Z = torch.tensor(d["c"], dtype=torch.bfloat16), torch.tensor(d["z"], dtype=torch.bfloat16)
    val = F(x=X, c=C, z=Z)
    val.backward()
    exact = {k: v.to(torch.float64).numpy() for k, v in (("x", X.detach()), ("c", C), ("z", Z))}
    assert val.item() == pytest.approx(tl.evaluate(deconv_loss, **exact), rel=1e-12)
    assert X.grad.dtype == torch.bfloat16
    np.testing.assert_allclose(X.grad.to(torch.float64).numpy(), tl.grad(deconv_loss, wrt=x)(**exact), rtol=1e-2, atol=1e-2)

    nn_, mm_ = tl.sizes("nn_ mm_")
    S = tl.relation("S", nn_, mm_)
    A = tl.sparse_tensor("A", S)
    v = tl.tensor("v", mm_)
    loss = tl.sum(nn_, lambda i: tl.sum(mm_, lambda j: A[i, j] * v[j]) ** 2)
    Am = sp.random(12, 7, density=0.3, random_state=0, format="coo")
    At = torch.sparse_coo_tensor(np.stack([Am.row, Am.col]), Am.data, Am.shape).to(torch.bfloat16).coalesce()
    At.requires_grad_(True)
    Vt = torch.ones(7, dtype=torch.bfloat16)
    out = tl.torch_function(loss)(A=At, v=Vt)
    out.backward()
    D = At.detach().to(torch.float64).to_dense().numpy()
    assert out.item() == pytest.approx(float(np.sum((D @ np.ones(7)) ** 2)), rel=1e-12)
    assert At.grad.dtype == torch.bfloat16 and At.grad.layout == torch.sparse_coo


def test_torch_training_loop_decreases_the_loss():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    truth = rng.normal(size=3)
    X = rng.normal(size=40)
    Z = np.convolve(X, truth, "valid")
    F = tl.torch_function(deconv_loss, x=X, z=Z)  # data fixed; the kernel c is learnt
    C = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([C], lr=0.1)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = F(c=C)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-3 * losses[0]
    np.testing.assert_allclose(C.detach().numpy(), truth, atol=1e-2)


# ---------------------------------------------------------------------------
# SciPy


def test_scipy_minimize_converges_on_a_quadratic():
    so = pytest.importorskip("scipy.optimize")
    N = 30
    t = np.sin(np.linspace(0, 3, N)) + np.random.default_rng(2).normal(scale=0.1, size=N)
    k = tl.size("k")
    xx, tt = tl.tensor("xx", k), tl.tensor("tt", k)
    loss = (tl.sum(k, lambda i: (xx[i] - tt[i]) ** 2)
            + 2.0 * tl.sum(k, lambda i: tl.iverson(i + 1 < k, (xx[i + 1] - xx[i]) ** 2)))
    obj = tl.scipy_objective(loss, wrt=xx, tt=t)
    x0 = obj.x0()  # zeros, of the length that tt gives k
    assert x0.shape == (N,) and not x0.any()
    res = so.minimize(obj, x0, jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15})
    # the minimiser solves (I + 2 L) x = t with L the path-graph Laplacian
    L = np.diag(np.r_[1, 2 * np.ones(N - 2), 1]) - np.eye(N, k=1) - np.eye(N, k=-1)
    want = np.linalg.solve(np.eye(N) + 2.0 * L, t)
    np.testing.assert_allclose(obj.unflatten(res.x)["xx"], want, atol=1e-6)
    assert obj.nfev == res.nfev and len(obj.values) == res.nfev


def test_scipy_objective_flattens_several_inputs():
    pytest.importorskip("scipy.optimize")
    d = deconv_data()
    obj = tl.scipy_objective(deconv_loss, wrt=[x, c], z=d["z"])
    v = obj.x0(x=d["x"], c=d["c"])
    assert v.shape == (d["x"].size + d["c"].size,)
    back = obj.unflatten(v)
    np.testing.assert_array_equal(back["x"], d["x"])
    np.testing.assert_array_equal(back["c"], d["c"])
    val, g = obj(v)
    gx, gc = tl.grad(deconv_loss, wrt=[x, c])(**d)
    assert val == pytest.approx(tl.evaluate(deconv_loss, **d), rel=1e-12)
    np.testing.assert_allclose(g, np.concatenate([gx, gc]), rtol=1e-12)
    with pytest.raises(tl.InputError, match="expected"):
        obj(v[:-1])


def test_scipy_objective_refusals():
    pytest.importorskip("scipy.optimize")
    with pytest.raises(tl.TensorLangError, match="scalar loss"):
        tl.scipy_objective(conv, wrt=x)
    with pytest.raises(tl.InputError, match="not an input"):
        tl.scipy_objective(deconv_loss, wrt=x, q=np.ones(3))
    with pytest.raises(tl.InputError, match=r"\['z'\] are neither in wrt nor given"):
        tl.scipy_objective(deconv_loss, wrt=[x, c])
    obj = tl.scipy_objective(deconv_loss, wrt=[x, c], z=np.ones(4))
    with pytest.raises(tl.InputError, match="cannot tell the shape of x"):
        obj.x0()  # z gives n, but nothing gives m


# ---------------------------------------------------------------------------
# a missing framework names the extra to install


@pytest.mark.parametrize("module, make", [
    ("jax", lambda: tl.jax_function(deconv_loss)),
    ("torch", lambda: tl.torch_function(deconv_loss)),
    ("scipy.optimize", lambda: tl.scipy_objective(deconv_loss, wrt=x)),
])
def test_missing_framework_names_the_extra(monkeypatch, module, make):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    extra = module.split(".")[0]
    with pytest.raises(ImportError, match=rf"pip install 'tensorlang\[{extra}\]'"):
        make()
