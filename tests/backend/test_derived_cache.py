"""The disk cache of derived programs (issue 14 item 6; backend/derived_cache.py).

A warm entry replaces the passes (the build function is not called); a
damaged, foreign or hostile entry is never trusted: it is deleted and the
program derived afresh, and every gradient is checked against NumPy.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pickle

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backend import derived_cache as dc


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TENSORLANG_DERIVED_CACHE", "1")
    return tmp_path


def _loss(k: float = 1.0):
    n = tl.size("n")
    x = tl.tensor("x", n)
    loss = tl.sum(n, lambda i: x[i] * x[i] * k) + tl.sum(n, lambda i: tl.sin(x[i]))
    return loss, x


def _want(x, k: float = 1.0):
    return 2 * k * x + np.cos(x)


def _boom():
    raise AssertionError("the passes ran although the entry is warm")


def test_warm_entry_replaces_the_passes(cache_dir):
    loss, x = _loss()
    xs = np.linspace(-1, 1, 7)
    g = tl.grad(loss, wrt=x)
    np.testing.assert_allclose(g(x=xs), _want(xs), rtol=1e-12)
    entries = glob.glob(os.path.join(cache_dir, "d_*.pkl"))
    assert len(entries) == 1
    # a new slot for the same request finds the program without deriving it
    e = dc.Entry("grad", loss, [x], {"adjoint": "sparse", "value": False})
    got = e.derive(_boom)
    assert e.hit and got is g.program
    # and the whole API path
    g2 = tl.grad(loss, wrt=x)
    assert g2.program is g.program
    np.testing.assert_allclose(g2(x=xs), _want(xs), rtol=1e-12)


def test_alpha_equivalent_source_hits_and_other_options_miss(cache_dir):
    loss, x = _loss()
    tl.grad(loss, wrt=x)
    loss2, x2 = _loss()  # built again: alpha-equivalent, one canonical form
    assert dc.Entry("grad", loss2, [x2], {"adjoint": "sparse", "value": False}).derive(_boom) is not None
    calls = []
    e = dc.Entry("grad", loss2, [x2], {"adjoint": "sparse", "value": True})
    e.derive(lambda: calls.append(1) or tl.const(0.0))
    assert calls == [1] and not e.hit


def _only_entry(cache_dir) -> str:
    (path,) = glob.glob(os.path.join(cache_dir, "d_*.pkl"))
    return path


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "directory"])
def test_damaged_entry_is_rebuilt(cache_dir, damage):
    loss, x = _loss()
    tl.grad(loss, wrt=x)
    path = _only_entry(cache_dir)
    data = open(path, "rb").read()
    if damage == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 0x40
        open(path, "wb").write(bytes(b))
    elif damage == "truncate":
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "empty":
        open(path, "wb").write(b"")
    else:
        os.unlink(path)
        os.mkdir(path)
    calls = []
    e = dc.Entry("grad", loss, [x], {"adjoint": "sparse", "value": False})
    from tensorlang.autodiff import _grad_derive
    from tensorlang.ir import REAL, Var

    prog = e.derive(lambda: calls.append(1) or _grad_derive(loss, [x], "sparse", Var("dy", 0, REAL), False))
    assert calls == [1] and not e.hit
    xs = np.linspace(-2, 2, 5)
    np.testing.assert_allclose(tl.evaluate(prog, x=xs), _want(xs), rtol=1e-12)
    assert os.path.isfile(path)  # stored afresh


def test_foreign_entry_is_never_used(cache_dir):
    """An entry of another program copied under this request's file name (what a
    hash collision would look like): the stored request text differs, so it is
    rebuilt and the gradient is this program's."""
    loss_a, xa = _loss(1.0)
    tl.grad(loss_a, wrt=xa)
    path_a = _only_entry(cache_dir)
    loss_b, xb = _loss(3.0)
    text_b = dc.request("grad", loss_b, [xb], {"adjoint": "sparse", "value": False})
    path_b = dc._path(text_b)
    os.replace(path_a, path_b)
    g = tl.grad(loss_b, wrt=xb)
    xs = np.linspace(-1, 1, 6)
    np.testing.assert_allclose(g(x=xs), _want(xs, 3.0), rtol=1e-12)


class _Evil:
    def __reduce__(self):
        return (os.getenv, ("PATH",))


def test_entry_naming_other_classes_is_refused(cache_dir):
    """A payload with a valid checksum that names a function outside the IR is
    refused by the loader before anything is called."""
    loss, x = _loss()
    text = dc.request("grad", loss, [x], {"adjoint": "sparse", "value": False})
    payload = pickle.dumps({"format": dc.FORMAT, "request": text, "program": _Evil()})
    path = dc._path(text)
    with open(path, "wb") as f:
        f.write(dc.MAGIC + hashlib.sha256(payload).digest() + payload)
    assert dc.load(text, loss) is None
    assert not os.path.exists(path)


def test_entry_reading_a_foreign_input_is_refused(cache_dir):
    """A well-formed entry whose program reads an input the source lacks."""
    loss, x = _loss()
    text = dc.request("grad", loss, [x], {"adjoint": "sparse", "value": False})
    other = tl.tensor("z", tl.size("n"))
    dc.store(text, tl.sum(tl.size("n"), lambda i: other[i]))
    assert dc.load(text, loss) is None


def test_switch_off(cache_dir, monkeypatch):
    monkeypatch.setenv("TENSORLANG_DERIVED_CACHE", "0")
    loss, x = _loss()
    g = tl.grad(loss, wrt=x)
    assert not glob.glob(os.path.join(cache_dir, "d_*.pkl"))
    xs = np.linspace(0, 1, 4)
    np.testing.assert_allclose(g(x=xs), _want(xs), rtol=1e-12)


def test_value_and_grad_vjp_jvp_warm_agree(cache_dir):
    loss, x = _loss()
    xs = np.linspace(-1, 1, 5)
    for _ in range(2):  # cold, then from the entries
        v, g = tl.value_and_grad(loss, wrt=x)(x=xs)
        np.testing.assert_allclose(g, _want(xs), rtol=1e-12)
        np.testing.assert_allclose(v, np.sum(xs * xs) + np.sum(np.sin(xs)), rtol=1e-12)
        (gv,) = (tl.vjp(loss, wrt=x)(x=xs, dy=2.0),)
        np.testing.assert_allclose(gv, 2 * _want(xs), rtol=1e-12)
        val, tan = tl.jvp(loss, wrt=x)(x=xs, dx=np.ones(5))
        np.testing.assert_allclose(tan, np.sum(_want(xs)), rtol=1e-12)
    assert len(glob.glob(os.path.join(cache_dir, "d_*.pkl"))) == 3  # one per kind


def test_wrt_inputs_of_one_name_and_another_type_are_other_requests(cache_dir):
    """The request named the ``wrt`` inputs by name only: a derivation for an
    ``x`` of another type (a user's mistyped ``tl.tensor("x", n, n)``) and
    the one for the program's ``x`` shared an entry, so a later process got
    the other's derived program: zeros of shape (n, n) for the gradient.
    Now the entry is keyed by the inputs themselves, and the API refuses a
    ``wrt`` input that shares its name with a different program input."""
    loss, x = _loss()
    n = tl.size("n")
    other = tl.tensor("x", n, n)
    opts = {"adjoint": "sparse", "value": False}
    assert dc.request("grad", loss, [other], opts) != dc.request("grad", loss, [x], opts)
    # an entry stored for the other x (here a program that is not x's gradient) is not x's
    dc.Entry("grad", loss, [other], opts).derive(lambda: tl.gen(n, lambda i: 7.0 * x[i]))
    xs = np.linspace(-1, 1, 7)
    np.testing.assert_allclose(tl.grad(loss, wrt=x)(x=xs), _want(xs), rtol=1e-12)
    for fn in (tl.grad, tl.value_and_grad, tl.vjp, tl.jvp):
        with pytest.raises(tl.TensorLangError, match=r"wrt names the input x of type \[n\]\[n\]ℝ, but the program's input x"):
            fn(loss, wrt=other)
    with pytest.raises(tl.TensorLangError, match="two different inputs of one name"):
        tl.grad(loss, wrt=[tl.tensor("y", n), tl.tensor("y", n, n)])
