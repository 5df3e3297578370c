"""The printer: the paper's notation, plain bound names (decorated only on a
real clash), sharing shown as lets."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.ir import Access, Add, Gen, IndexVar, Let, Mul, Sum, Var, sym_aff
from tensorlang.printer import pretty, pretty_aff, pretty_pred, pretty_type

from tests.strategies import Program, programs

n, m = tl.sizes("n m")
x = tl.tensor("x", n + m - 1)
c = tl.tensor("c", m)
z = tl.tensor("z", n)


def test_convolution_in_the_papers_notation():
    f = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    assert str(f) == "gen[i:n] sum[j:m] x[i - j + m - 1]·c[j]"


def test_brackets_predicates_exists_and_relations():
    R = tl.relation("R", n, n)
    e = tl.sum(n, lambda i: tl.iverson(tl.exists(n, lambda k: R(i, k) & (k < i)) | (i == 2), z[i]))
    assert str(e) == "sum[i:n] [(exists[k:n] R(i, k) ∧ k < i) ∨ i = 2]·z[i]"
    assert pretty_pred((sym_aff(IndexVar("i", 1)) <= 3)) == "i ≤ 3"


def test_subtraction_division_powers_and_negation():
    a, b = tl.scalar("a"), tl.scalar("b")
    assert str(a - b) == "a - b"
    assert str(a - b * a) == "a - b·a"
    assert str(a - (b + a)) == "a - (b + a)"
    assert str(-a * b) == "(-a)·b"
    assert str(-(a * b)) == "-a·b"
    assert str(a * -b) == "a·(-b)"
    assert str(a / (b * a)) == "a / (b·a)"
    assert str((a + b) ** 3) == "(a + b)^3"
    assert str(tl.exp(a) * tl.sigmoid(b)) == "exp(a)·sigmoid(b)"
    assert str((a + b) * a) == "(a + b)·a"
    assert str(a * 0.5 + -2) == "a·0.5 + -2"
    assert str(tl.iverson(sym_aff(IndexVar("i", 3)) < 2, a) * b) == "([i < 2]·a)·b"
    assert str(tl.iverson(sym_aff(IndexVar("i", 3)) < 2, a * b)) == "[i < 2]·a·b"
    assert str(b * tl.iverson(sym_aff(IndexVar("i", 3)) < 2, a)) == "b·[i < 2]·a"


def test_gens_and_sums_are_parenthesized_inside_operators():
    e = tl.sum(n, lambda i: z[i]) * 2
    assert str(e) == "(sum[i:n] z[i])·2"
    g = tl.gen(n, lambda i: z[i] * 2)[0]
    assert str(g) == "(gen[i:n] z[i]·2)[0]"


def test_pairs_projections_and_types():
    s = tl.scalar("s")
    p = tl.pair(z, s)
    assert str(p) == "(z, s)"
    assert str(tl.proj(p, 1)) == "π1 (z, s)"
    assert str(tl.proj(tl.var("q", tl.pair_type(z.type, tl.Real)), 0)[1]) == "(π0 q)[1]"
    assert pretty_type(tl.pair_type(tl.tensor_of([n, m]), tl.Real)) == "([n][m]ℝ × ℝ)"


def test_sibling_binders_share_a_name():
    A = tl.tensor("A", n, n)
    e = tl.sum(n, lambda i: A[i, i]) + tl.sum(n, lambda i: z[i])
    assert str(e) == "(sum[i:n] A[i, i]) + (sum[i:n] z[i])"


def test_a_clashing_inner_binder_is_decorated_only_when_the_outer_is_used():
    A = tl.tensor("A", n, n)
    outer, inner = IndexVar("i", tl.ir.fresh_uid()), IndexVar("i", tl.ir.fresh_uid())
    clash = Gen(outer, n, Sum(inner, n, Access(Access(A, sym_aff(inner)), sym_aff(outer))))
    assert str(clash) == "gen[i:n] sum[i':n] A[i', i]"
    unused = Gen(outer, n, Sum(inner, n, Access(z, sym_aff(inner))))
    assert str(unused) == "gen[i:n] sum[i:n] z[i]"  # the outer i is not referenced: no clash
    three = Gen(outer, n, Sum(inner, n, Sum(IndexVar("i", tl.ir.fresh_uid()), n, Access(z, sym_aff(outer)))))
    assert str(three) == "gen[i:n] sum[i':n] sum[i':n] z[i]"  # neither inner binder may be i


def test_binders_avoid_input_and_size_names():
    k = IndexVar("n", tl.ir.fresh_uid())
    e = Gen(k, n, Access(z, sym_aff(k)))
    assert str(e) == "gen[n':n] z[n']"
    w = IndexVar("z", tl.ir.fresh_uid())
    assert str(Sum(w, n, Access(z, sym_aff(w)))) == "sum[z':n] z[z']"


def test_free_indices_print_plainly_and_distinctly():
    i1, i2 = IndexVar("i", 101), IndexVar("i", 102)
    assert pretty_aff(sym_aff(i1) + sym_aff(i2)) == "i + i'"
    assert str(Access(z, sym_aff(i1))) == "z[i]"


def test_lets_print_and_shadowing_lets_are_decorated():
    e = tl.let(tl.gen(n, lambda i: z[i] * 2), lambda t: tl.sum(n, lambda i: t[i]))
    assert str(e) == "let t = gen[i:n] z[i]·2 in\nsum[i:n] t[i]"
    t1 = Var("t", tl.ir.fresh_uid(), tl.Real)
    t2 = Var("t", tl.ir.fresh_uid(), tl.Real)
    nested = Let(t1, z[0], Let(t2, Mul(t1, t1), Add(t2, t1)))
    assert str(nested) == "let t = z[0] in\nlet t' = t·t in\nt' + t"
    # a let whose value mentions an outer variable of the same name is decorated too
    reads_outer = Let(t1, z[0], Let(t2, Mul(t1, t1), Mul(t2, t2)))
    assert str(reads_outer) == "let t = z[0] in\nlet t' = t·t in\nt'·t'"


def test_pretty_shows_sharing_as_lets_and_str_shows_the_tree():
    y = tl.gen(n, lambda i: tl.sum(m, lambda j: x[i - j + m - 1] * c[j]))
    loss = tl.sum(n, lambda i: (y[i] - z[i]) ** 2)
    shown = tl.pretty(loss)
    assert shown == (
        "let t = gen[i:n] sum[j:m] x[i - j + m - 1]·c[j] in\n"
        "sum[i:n] let t' = t[i] - z[i] in\n"
        "t'·t'"
    )
    tree = pretty(loss)  # the printer only prints: no sharing pass
    assert tree.count("gen[") == 2 and "let" not in tree
    assert str(loss) == repr(loss) == tree == tl.pretty(loss, sharing=False)


def test_printing_predicates_types_and_indices_directly():
    i = IndexVar("i", 7)
    assert pretty(sym_aff(i) * 2 - n) == "2·i - n"
    assert pretty(tl.tensor_of([n])) == "[n]ℝ"
    assert pretty(sym_aff(i) < n) == "i < n"
    assert pretty_aff(tl.ir.as_aff(0)) == "0"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_every_random_program_prints(prog: Program):
    text = str(prog.expr)
    assert text and not any(ch in text for ch in "₀₁₂₃₄₅₆₇₈₉")  # plain names, no uids
    assert pretty(prog.expr)
