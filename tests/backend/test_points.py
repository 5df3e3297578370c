"""Each access at its point (backend/points.py): the facts a pass's isl
question may use, and only those.

Hand-built loops over tiles of ``K``: an access is proven inside its own tile
from the loop bounds, from an ``if`` around it, from an affine scalar
assigned before it, from a stepped loop's steps; and not proven when a fact
is missing or wrong (one element past the tile, an index read from data, a
scalar reassigned inside a loop, the else side of a test).  Checked against
brute force: every claim ``in_tiles`` makes is confirmed by running the
loop's index arithmetic at small sizes.  Never a time.
"""

from __future__ import annotations

import itertools

import pytest

from tensorlang.backend import kir as K
from tensorlang.backend.loopir import AccAdd, Assign, If, Loop, Store
from tensorlang.backend.points import in_tiles, tile_sizes

KT = 8
N = K.Name("n0")
U, H = K.Name("u"), K.Name("h")


def _tile_lo():
    return K.IBin("*", K.Int(KT), U)


def _tile_hi(extra=0):
    return K.MinMax("min", (N, K.IBin("+", _tile_lo(), K.Int(KT + extra))))


def _loop(inner, tiles=None):
    hi = tiles if tiles is not None else K.IBin("//", K.IBin("+", N, K.Int(KT - 1)), K.Int(KT))
    return Loop("u", K.Int(0), hi, 1, tuple(inner), "gen")


def _store(ix):
    return Store("t0", (ix,), K.Float(1.0))


def _writes(loop, n_max=30):
    """Brute force: ``{(n, u, index)}`` of every store into t0 (the loop IR run in Python)."""
    out = set()
    for n in range(0, n_max):
        _run((loop,), {"n0": n}, out, n)
    return out


def _run(stmts, env, out, n):
    for s in stmts:
        if isinstance(s, Loop):
            lo, hi = K.evaluate_int(s.lo, env), K.evaluate_int(s.hi, env)
            for v in range(lo, hi, s.step):
                env[s.var] = v
                _run(s.body, env, out, n)
        elif isinstance(s, If):
            _run(s.then if K.evaluate_int(s.cond, env) else s.orelse, env, out, n)
        elif isinstance(s, Assign):
            env[s.target] = K.evaluate_int(s.value, env)
        elif isinstance(s, AccAdd):
            env[s.target] += K.evaluate_int(s.value, env)
        elif isinstance(s, Store):
            out.add((n, env["u"], K.evaluate_int(s.index[0], env)))


def _inside(loop):
    return all(KT * u <= ix < KT * u + KT for _, u, ix in _writes(loop))


def _claims(loop):
    got = in_tiles(loop, "t0", "write", {"n0"}, KT, True, True)
    if got:  # a claim is confirmed by brute force at small sizes
        assert _inside(loop)
    return got


def test_bounds_alone():
    loop = _loop([Loop("h", _tile_lo(), _tile_hi(), 1, (_store(H),), "gen")])
    assert tile_sizes(loop) == [KT]
    assert _claims(loop)


def test_one_past_the_tile_is_not_proven():
    loop = _loop([Loop("h", _tile_lo(), _tile_hi(1), 1, (_store(H),), "gen")])
    assert not _claims(loop) and not _inside(loop)


def test_a_guard_is_a_fact_and_its_else_side_is_not():
    guard = K.Cmp("<", H, K.IBin("+", _tile_lo(), K.Int(KT)))
    then = _loop([Loop("h", _tile_lo(), _tile_hi(1), 1, (If(guard, (_store(H),)),), "gen")])
    assert _claims(then)
    orelse = _loop([Loop("h", _tile_lo(), _tile_hi(1), 1, (If(guard, (), (_store(H),)),), "gen")])
    assert not _claims(orelse)


def test_an_affine_scalar_stands_for_its_value():
    v = K.Name("v0")
    loop = _loop([Assign("v0", _tile_lo()), Loop("h", K.Int(0), K.Int(KT), 1,
                                                   (If(K.Cmp("<", K.IBin("+", v, H), N), (_store(K.IBin("+", v, H)),)),),
                                                   "gen")])
    assert _claims(loop)


def test_a_scalar_reassigned_in_a_loop_is_not_a_fact():
    # v0 grows by one per h: its value at the store is not the one assigned before the loop
    v = K.Name("v0")
    loop = _loop([Assign("v0", _tile_lo()),
                  Loop("h", K.Int(0), K.Int(KT), 1, (AccAdd("v0", K.Int(1)), _store(v)), "gen")])
    assert not _claims(loop)


def test_an_index_read_from_data_is_not_proven():
    loop = _loop([_store(K.Load("x0", (U,), True))])
    assert not in_tiles(loop, "t0", "write", {"n0"}, KT, True, True)


@pytest.mark.parametrize("step", [2, 3])
def test_a_stepped_loop_counts_its_steps(step):
    # pairs (h, h + 1) from a stepped loop whose bound keeps the pair inside the tile
    span = K.IBin("-", _tile_hi(), _tile_lo())
    top = K.IBin("+", _tile_lo(), K.IBin("*", K.IBin("//", span, K.Int(step)), K.Int(step)))
    body = tuple(_store(K.IBin("+", H, K.Int(k))) for k in range(step))
    loop = _loop([Loop("h", _tile_lo(), top, step, body, "gen")])
    assert _claims(loop)
    # the same loop at step 1 visits every h below the bound: proven exactly when that stays inside
    # (at step 2, h + 1 passes a full tile's end; at step 3, 3·⌊8/3⌋ + 1 < 8 does not)
    loose = _loop([Loop("h", _tile_lo(), top, 1, body, "gen")])
    assert _claims(loose) == _inside(loose) == (step == 3)


def test_brute_force_agrees_on_random_offsets():
    # every combination of a lower and an upper offset of the inner range: proven exactly
    # when brute force finds every store inside its tile (isl decides these sets exactly)
    for a, b in itertools.product(range(-2, 3), range(-2, 3)):
        lo = K.IBin("+", _tile_lo(), K.Int(a))
        loop = _loop([Loop("h", lo, _tile_hi(b), 1, (If(K.Cmp(">=", H, K.Int(0)), (_store(H),)),), "gen")])
        assert _claims(loop) == _inside(loop), (a, b)
