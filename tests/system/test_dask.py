"""tensorlang.dask: batch-sharded losses on a dask.distributed LocalCluster (issue #19).

Every sharded result is checked against single-process ``tl.value_and_grad``
on the whole (concatenated) batch, and the deconvolution's value against
NumPy.  One cluster (2 worker processes, 1 thread each) serves the module.
Sizes are small, so workers run the reference evaluator (runtime policy);
``benchmarks/dask_bench.py`` runs the compiled kernels at scale.
"""

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import tensorlang as tl  # noqa: E402
import tensorlang.dask as tld  # noqa: E402

# -- programs ----------------------------------------------------------------

b, n, m = tl.sizes("b n m")
x = tl.tensor("x", b, n + m - 1)
z = tl.tensor("z", b, n)
w = tl.tensor("w", m)
conv = tl.gen([b, n], lambda k, i: tl.sum(m, lambda j: x[k, i - j + m - 1] * w[j]))
deconv = tl.sum([b, n], lambda k, i: (conv[k, i] - z[k, i]) ** 2)

h, wd = tl.sizes("h wd")
u = tl.tensor("u", b, h, wd)
f = tl.tensor("f", b, h, wd)
c = tl.tensor("c", 3, 3)
lam = tl.scalar("lam")


def _inside(j, i):
    return (j >= 0) & (j < h) & (i >= 0) & (i < wd)


# a 3x3 filter c shared by a batch of images u, fit to targets f, plus a
# smoothness prior on each image (two batch sums, one scaled by a shared scalar)
filt = tl.gen([b, h, wd], lambda k, j, i: tl.sum([3, 3], lambda p, q: tl.iverson(
    _inside(j + p - 1, i + q - 1), c[p, q] * u[k, j + p - 1, i + q - 1])))
image = tl.sum([b, h, wd], lambda k, j, i: (filt[k, j, i] - f[k, j, i]) ** 2) + lam * tl.sum(
    [b, h, wd], lambda k, j, i: tl.iverson(i + 1 < wd, (u[k, j, i + 1] - u[k, j, i]) ** 2))


def _die_once(v):
    """Identity; the first call inside a Dask worker kills that worker's process."""
    marker = os.environ.get("TL_TEST_DIE_MARKER")
    try:
        distributed.get_worker()
    except ValueError:  # not in a worker (the single-process reference)
        return v
    if marker and not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(str(os.getpid()))
        os._exit(1)
    return v


die_once = tl.register_function("die_once", 1, numpy=_die_once, sympy=lambda v: v,
                                partials=lambda v: (tl.const(1),), replace=True)
deconv_dying = tl.sum([b, n], lambda k, i: (tl.sum(m, lambda j: die_once(x[k, i - j + m - 1]) * w[j])
                                            - z[k, i]) ** 2)


def deconv_data(B=10, N=24, M=4, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(B, N + M - 1)), "z": rng.normal(size=(B, N)), "w": rng.normal(size=M)}


def image_data(B=4, H=4, W=5, seed=1):
    rng = np.random.default_rng(seed)
    return {"u": rng.normal(size=(B, H, W)), "f": rng.normal(size=(B, H, W)),
            "c": rng.normal(size=(3, 3)), "lam": 0.3}


def assert_same(got, want):
    (v, gs), (v0, gs0) = got, want
    assert v == pytest.approx(v0, rel=1e-10)
    for g, g0 in zip(gs, gs0):
        g = g.compute() if isinstance(g, da.Array) else g
        np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-12)


# -- pickling (no cluster) ------------------------------------------------------


def test_programs_pickle_interned_and_fresh_past_their_uids():
    blob = pickle.dumps(deconv)
    assert pickle.loads(blob) is deconv  # same process: the very same node
    code = textwrap.dedent("""
        import pickle, sys
        from tensorlang import ir
        blob = sys.stdin.buffer.read()
        a, b = pickle.loads(blob), pickle.loads(blob)
        uids = [c.uid for n in ir.walk(a) for c in ir.children(n) if isinstance(c, ir.IndexVar)]
        print(a is b, ir.fresh_uid() > max(uids), len(uids) > 0)
    """)
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True)
    assert out.stdout.split() == [b"True", b"True", b"True"]


def test_local_scheduler_without_a_client():
    try:
        distributed.default_client()
    except ValueError:  # no Client: tensorlang.dask uses Dask's local scheduler
        pass
    else:
        pytest.skip("a Client exists in this process")
    assert tld.dask.__file__ == da.__file__.replace("array/__init__.py", "__init__.py")  # the real Dask
    data = deconv_data()
    want = tl.value_and_grad(deconv, [x, w])(**data)
    got = tld.value_and_grad(deconv, [x, w], batch=b)(
        x=da.from_array(data["x"], chunks=(4, -1)), z=data["z"], w=data["w"])  # z: NumPy, one chunk
    assert got[1][0].chunks[0] == (4, 4, 2)  # the partition of the batched input given as a dask array
    assert_same(got, want)


def test_an_empty_batch_is_a_sum_of_no_terms():
    """B = 0 is a valid program (the loss is 0, every gradient 0): it was refused as "nothing to
    shard" though tl.value_and_grad computes it (session 12's hunt)."""
    data = deconv_data()
    data = {"x": data["x"][:0], "z": data["z"][:0], "w": data["w"]}
    want = tl.value_and_grad(deconv, [x, w])(**data)
    got = tld.value_and_grad(deconv, [x, w], batch=b)(x=da.from_array(data["x"], chunks=(1, -1)), z=data["z"], w=data["w"])
    assert got[1][0].shape == data["x"].shape and isinstance(got[1][0], da.Array)
    assert_same(got, want)
    assert got[0] == 0 and not np.any(got[1][1])


# -- on the cluster ---------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    marker = tmp_path_factory.mktemp("dask") / "died"
    os.environ["TL_TEST_DIE_MARKER"] = str(marker)  # workers inherit the environment
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    cl = distributed.Client(cluster)
    cl.marker = marker
    yield cl
    cl.close()
    cluster.close()


def test_deconvolution_equals_single_process(client):
    data = deconv_data()
    want = tl.value_and_grad(deconv, [x, w])(**data)
    fv = np.stack([np.convolve(r, data["w"], mode="valid") for r in data["x"]])
    assert want[0] == pytest.approx(((fv - data["z"]) ** 2).sum(), rel=1e-10)
    vg = tld.value_and_grad(deconv, [x, w], batch=b)
    X, Z = da.from_array(data["x"], chunks=(3, -1)), da.from_array(data["z"], chunks=(3, -1))
    value, (gx, gw) = got = vg(x=X, z=Z, w=data["w"])
    assert isinstance(value, float) and isinstance(gw, np.ndarray)
    assert isinstance(gx, da.Array) and gx.chunks == X.chunks
    assert_same(got, want)
    gx2, gw2 = tld.grad(deconv, [x, w], batch=b)(x=X, z=Z, w=data["w"])  # the same program: no new build
    np.testing.assert_allclose(gw2, want[1][1], rtol=1e-10)
    np.testing.assert_allclose(gx2.compute(), want[1][0], rtol=1e-10)


def test_image_loss_equals_single_process(client):
    data = image_data()
    want = tl.value_and_grad(image, [u, c, lam])(**data)
    vg = tld.value_and_grad(image, [u, c, lam], batch=b)
    got = vg(u=da.from_array(data["u"], chunks=(2, -1, -1)), f=da.from_array(data["f"], chunks=(2, -1, -1)),
             c=data["c"], lam=data["lam"])
    assert got[1][0].chunks == ((2, 2), (4,), (5,))
    assert_same(got, want)


def test_a_shared_sparse_tensor_gets_a_tree_reduced_sparse_gradient(client):
    """A sparse coupling A shared by the batch (issue 16 with 19): its gradient
    is summed over chunks as csr matrices on A's own pattern, never densified."""
    sps = pytest.importorskip("scipy.sparse")
    nn, mm = tl.sizes("nn mm")
    S = tl.relation("S", nn, mm)
    A = tl.sparse_tensor("A", S)
    xs, bs = tl.tensor("xs", b, mm), tl.tensor("bs", b, nn)
    r = tl.gen([b, nn], lambda k, i: tl.sum(mm, lambda j: A[i, j] * xs[k, j]) - bs[k, i])
    lsq = tl.sum([b, nn], lambda k, i: r[k, i] * r[k, i])
    rng = np.random.default_rng(3)
    Am = sps.random(12, 7, density=0.3, random_state=3, format="csr")
    X, Bv = rng.normal(size=(9, 7)), rng.normal(size=(9, 12))
    value, (gx, gA) = tld.value_and_grad(lsq, [xs, A], batch=b)(
        xs=da.from_array(X, chunks=(4, -1)), bs=da.from_array(Bv, chunks=(4, -1)), A=Am)
    res = np.stack([Am @ xr for xr in X]) - Bv  # the independent NumPy/scipy reference
    assert value == pytest.approx(float((res ** 2).sum()), rel=1e-10)
    np.testing.assert_allclose(gx.compute(), 2 * res @ Am.toarray(), rtol=1e-10)
    assert sps.issparse(gA) and gA.nnz == Am.nnz
    np.testing.assert_allclose(gA.toarray(), (2 * res.T @ X) * (Am.toarray() != 0), rtol=1e-10, atol=1e-12)


def test_unequal_and_mismatched_chunks(client):
    data = deconv_data(B=10)
    want = tl.value_and_grad(deconv, [x, w, z])(**data)
    vg = tld.value_and_grad(deconv, [x, w, z], batch=b)
    X = da.from_array(data["x"], chunks=((1, 4, 2, 3), (20, 7)))  # trailing axis in two chunks
    Z = da.from_array(data["z"], chunks=((5, 5), (24,)))  # another partition of the batch
    got = vg(x=X, z=Z, w=data["w"])
    assert got[1][0].chunks[0] == (1, 4, 2, 3)
    assert got[1][2].chunks[0] == (1, 4, 2, 3)
    assert_same(got, want)


def test_each_worker_builds_a_program_once(client):
    data = image_data(B=6, seed=3)
    want = tl.grad(image, c)(**data)
    g = tld.grad(image, c, batch=b)  # a single wrt: its gradient comes back bare
    before = client.run(tld.cache_info)
    for _ in range(2):
        gc = g(u=da.from_array(data["u"], chunks=(1, -1, -1)), f=da.from_array(data["f"], chunks=(1, -1, -1)),
               c=data["c"], lam=data["lam"])
        np.testing.assert_allclose(gc, want, rtol=1e-10)
    after = client.run(tld.cache_info)
    common = set(before) & set(after)
    assert common
    assert sum(after[k]["chunks"] - before[k]["chunks"] for k in common) == 12
    assert all(after[k]["builds"] - before[k]["builds"] <= 1 for k in common)


def test_a_worker_killed_mid_run_is_retried_and_exact(client):
    data = deconv_data(B=8, seed=5)
    want = tl.value_and_grad(deconv_dying, [x, w])(**data)
    assert not client.marker.exists()
    vg = tld.value_and_grad(deconv_dying, [x, w], batch=b)
    got = vg(x=da.from_array(data["x"], chunks=(2, -1)), z=da.from_array(data["z"], chunks=(2, -1)), w=data["w"])
    assert client.marker.exists()  # a worker process did die inside a chunk task
    assert_same(got, want)
    client.wait_for_workers(2, timeout=60)


def test_bad_chunk_data_fails_naming_the_chunk(client):
    data = deconv_data(B=6)
    vg = tld.value_and_grad(deconv, [x, w], batch=b)
    import dask

    good = da.from_array(data["x"][:3], chunks=(3, -1))
    lying = da.from_delayed(dask.delayed(np.zeros)((3, 26)), shape=(3, 27), dtype=float)  # trailing 26 != 27
    X = da.concatenate([good, lying], axis=0)
    with pytest.raises(tl.TensorLangError, match=r"chunk 1 \(batch rows 3:6\) of input x has shape \(3, 26\)"):
        vg(x=X, z=da.from_array(data["z"], chunks=(3, -1)), w=data["w"])
    Xm = da.from_array(data["x"], chunks=(2, -1))
    Xm = Xm[da.from_array(np.arange(6) != 4, chunks=2)]  # unknown (NaN) chunk sizes
    with pytest.raises(tl.TensorLangError, match="chunk 0 of batched input x has an unknown size"):
        vg(x=Xm, z=da.from_array(data["z"][:5], chunks=(2, -1)), w=data["w"])
    with pytest.raises(tl.TensorLangError, match="disagree on the batch size"):
        vg(x=da.from_array(data["x"]), z=da.from_array(data["z"][:5]), w=data["w"])
    with pytest.raises(tl.TensorLangError, match="input z .* n = 23"):  # checked before any task runs
        vg(x=da.from_array(data["x"]), z=da.from_array(data["z"]), w=np.ones(5))


# -- refusals (no data needed) -------------------------------------------------------

A = tl.tensor("A", n, b)
y = tl.tensor("y", b, n)
S = tl.tensor("S", b, b)


@pytest.mark.parametrize("loss, why", [
    (tl.sum(b, lambda k: y[k, 0]) ** 2, "multiplies two factors"),
    (tl.exp(tl.sum(b, lambda k: y[k, 0])), "applies exp"),
    (tl.sum(b, lambda k: tl.iverson(k + 1 < b, y[k + 1, 0])), "occurs in"),
    (tl.sum(b, lambda k: tl.sum(n, lambda i: y[k, i] * y[0, i])), "reads row 0"),
    (tl.sum(b, lambda k: tl.iverson(k == 0, y[k, 0])), "batch index k"),
    (tl.sum(b, lambda k: y[k, 0]) + tl.sum(m, lambda j: w[j]), "does not depend on the batch"),
    (tl.sum(n, lambda i: tl.sum(b, lambda k: A[i, k])), "input A has type"),
    (tl.sum(b, lambda k: S[k, 0]), "input S has type"),
    (tl.sum(b, lambda k: tl.sum(b, lambda k2: y[k, 0] * y[k2, 0])), "b occurs in b"),
    (tl.let(tl.gen(b, lambda k: y[k, 0]), lambda v: tl.sum(b, lambda k: v[0] * y[k, 0])), "reads row 0"),
    (tl.sum(b, lambda k: w[0]), "no input has b as its leading extent"),
    (tl.sum(n, lambda i: z[0, i]), r"z\[0, i\] is not a sum over b"),
    (tl.sum(m, lambda j: w[j]), "does not occur in the loss"),
])
def test_non_shardable_losses_are_refused(loss, why):
    wrt = [v for v in (y, w, A, S, z) if v.name in {q.name for q in tl.ir.input_vars(loss)}]
    with pytest.raises(tl.TensorLangError, match=why):
        tld.value_and_grad(loss, wrt, batch=b)


@pytest.mark.parametrize("loss", [
    tl.sum(n, lambda i: tl.sum(b, lambda k: y[k, i] * w[0])),  # sums in either order
    tl.let(tl.sum(m, lambda j: w[j]), lambda s: s * tl.sum(b, lambda k: y[k, 0])),  # shared let, scaled sum
    tl.let(tl.gen(b, lambda k: y[k, 0] * 2), lambda v: tl.sum(b, lambda k: v[k] * v[k])),  # batched let
])
def test_shardable_forms_are_accepted(loss):
    plan = tld.shard_plan(loss, b, [y])
    assert [v.name for v in plan.batched] == ["y"]
