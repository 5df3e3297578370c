"""Size classes: a kernel compiled with only the versions its call's sizes can take
(issue #14 item 6, compile latency: "size-class variants chosen per plan").
No paper rule: every version computes the same value, so the program and its
Figure 6 cost (paper Section 4.3) are those of the all-versions kernel.

Several passes give a kernel two versions of some statements, chosen at run
time by a test that reads only the sizes:

* short_slabs.py: ``if len(D) < SHORT and r_hi - r_lo >= RUN_MIN:`` a
  short slab's elements gathered, tile by tile of the outer index, before the nest;
* blas.py: ``if worth_blas(...): np.dot(...) else: loops``;
* rowfuse.py: ``if no BLAS choice takes BLAS: fused loops else: original``;
* fission.py: ``if every row fits MAX_ROW: split loops else: the loop``.

Numba compiles both versions of each, though a call's sizes take one.  Each
such ``If`` (loopir.py) says which of its sides is *general*: right at every
size (the loops behind a BLAS call, the fused loops, the nest without its
gathers), the other being a faster or cheaper version right where the test
sends it.  The tests of a kernel (``version_tests``: those whose condition
reads nothing but the kernel's size arguments) are evaluated at a call's
sizes once per call signature (api.Kernel, when it builds the plan) and
:func:`decide` takes, for each test whose value selects the general side,
that side alone: the other version is not printed, so not compiled.  A test
whose value selects the special side stays a run-time test with both
versions, since the special one alone is not known right at other sizes.  So a
kernel compiled for one class computes the right value at every size
(tests/backend/test_size_classes.py calls one at another class's sizes),
and at its own class's sizes it runs exactly the statements the
all-versions kernel runs there: the same result, bitwise.

A decided ``If`` marked ``cold`` (the loops behind a GEMM, printed without
lanes: codegen.py) stays an ``If`` on the constant ``False``, which codegen
prints as its else side alone, still without lanes.

A class is one bit per test (the first ``MAX_TESTS`` tests of a kernel; any
further one stays a run-time test in every variant), and a class that drops
nothing runs the all-versions kernel itself.  Each class a kernel meets is
compiled once, on the first plan of its sizes (a later signature of another
class compiles that class too), and is its own cache entry
(api.Kernel.class_variant: the key names the bits; this module imports
neither api.py nor codegen.py, which import it).  Tests travel in the kernel's spec
(``size_tests``) as JSON (:func:`encode`), so a warm process picks its class
without lowering anything; a damaged or foreign entry only loses the class
(the all-versions kernel runs), never a value, since every class variant is
right at every size.  Decisions are taken on kernel-IR nodes, never on text.
"""

from __future__ import annotations

from dataclasses import replace

from . import kir as K
from .loopir import If, Loop, walk_stmts

MAX_TESTS = 6  # tests per kernel that classes are made of: at most 2**6 variants


def _sizes(ir) -> list:
    """The kernel's size arguments (allocator letter ``n``, kir.NameAllocator), in call order."""
    return [a for a in ir.args if a[:1] == "n" and a[1:].isdigit()]


def version_tests(ir, runs, out: list) -> list:
    """Append to ``out`` each condition of a version choice in the printed
    loop IRs ``runs`` (of the kernel ``ir``) that reads only size arguments,
    once, with ``[drops when true, drops when false]`` (whether some choice
    on it then takes its general side): ``out`` holds ``[cond, drops]``."""
    from .rw import names  # code generation's module: a warm process only evaluates tests

    sizes = set(_sizes(ir))
    for run in runs:
        for s in walk_stmts(run.body):
            if not (isinstance(s, If) and s.general in ("then", "orelse")) or isinstance(s.cond, K.Bool):
                continue
            if not names(s.cond, set()) <= sizes:
                continue
            got = next((t for t in out if t[0] == s.cond), None)
            if got is None:
                got = [s.cond, [False, False]]
                out.append(got)
            got[1][0 if s.general == "then" else 1] = True
    return out


def decide(stmts, truth: dict) -> tuple:
    """``stmts`` with each version choice whose condition has a value in
    ``truth`` (cond -> bool) and selects its general side replaced by that
    side (module doc); every other statement as it was (bodies entered)."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            out.append(replace(s, body=decide(s.body, truth)))
            continue
        if not isinstance(s, If):
            out.append(s)
            continue
        v = truth.get(s.cond) if s.general in ("then", "orelse") else None
        then, orelse = decide(s.then, truth), decide(s.orelse, truth)
        if v is True and s.general == "then":
            out.extend(then)
        elif v is False and s.general == "orelse":
            if s.cold and orelse:  # still printed without lanes (module doc)
                out.append(If(K.Bool(False), (), orelse, cold=True))
            else:
                out.extend(orelse)
        else:
            out.append(replace(s, then=then, orelse=orelse))
    return tuple(out)


# -- the tests in the spec (JSON) ------------------------------------------------------------


def encode(cond, sizes: list):
    """A size test as JSON (ints, bools, strings, lists); ``sizes``: the kernel's size arguments."""
    match cond:
        case K.Bool(value=v):
            return bool(v)
        case K.Int(value=v):
            return int(v)
        case K.Name(name=n) if n in sizes and n == f"n{sizes.index(n)}":
            return ["s", sizes.index(n)]  # size k is the kernel's argument n<k> (lower.py's order)
        case K.IBin(op=op, lhs=a, rhs=b):
            return ["i", op, encode(a, sizes), encode(b, sizes)]
        case K.MinMax(fn=f, args=args):
            return ["m", f, [encode(a, sizes) for a in args]]
        case K.Cmp(op=op, lhs=a, rhs=b):
            return ["c", op, encode(a, sizes), encode(b, sizes)]
        case K.BoolOp(op=op, args=args):
            return ["b", op, [encode(a, sizes) for a in args]]
    raise TypeError(f"not a size test: {cond!r}")


_OPS = {"i": ("+", "-", "*", "//", "%"), "m": ("min", "max"), "c": ("<", "<=", "==", ">=", ">"), "b": ("and", "or")}


def decode(j, depth: int = 0):
    """:func:`encode`'s inverse (a kir node, size ``k`` named ``n<k>``); ValueError on anything else."""
    if depth > 24:
        raise ValueError("size test nested too deep")
    if isinstance(j, bool):
        return K.Bool(j)
    if isinstance(j, int):
        return K.Int(j)
    if not isinstance(j, list) or not j or j[0] not in ("s",) + tuple(_OPS):
        raise ValueError(f"not an encoded size test: {j!r}")
    tag = j[0]
    if tag == "s":
        if len(j) != 2 or isinstance(j[1], bool) or not isinstance(j[1], int) or not 0 <= j[1] < 1 << 16:
            raise ValueError(f"bad size reference {j!r}")
        return K.Name(f"n{j[1]}")
    if len(j) < 3 or j[1] not in _OPS[tag]:
        raise ValueError(f"bad operator in {j!r}")
    if tag in ("i", "c"):
        if len(j) != 4:
            raise ValueError(f"bad arity in {j!r}")
        a, b = decode(j[2], depth + 1), decode(j[3], depth + 1)
        return K.IBin(j[1], a, b) if tag == "i" else K.Cmp(j[1], a, b)
    if len(j) != 3 or not isinstance(j[2], list) or not j[2]:
        raise ValueError(f"bad arguments in {j!r}")
    args = tuple(decode(a, depth + 1) for a in j[2])
    return K.MinMax(j[1], args) if tag == "m" else K.BoolOp(j[1], args)


def spec_tests(tests: list, ir) -> list:
    """``version_tests``' list as the spec's ``size_tests``: ``[[test, drops], ...]``."""
    sizes, out = _sizes(ir), []
    for c, drops in tests:
        try:
            out.append([encode(c, sizes), [bool(d) for d in drops]])
        except TypeError:  # not expressible over the sizes: no class can decide it (it stays a run-time test)
            pass
    return out[:MAX_TESTS]  # the others stay run-time tests in every variant


def size_class(spec_tests, size_values: list):
    """``(bits, truth)`` of a call whose size arguments are ``size_values``
    (the spec's ``sizes`` order): ``bits`` one character per test, ``truth``
    cond -> bool for :func:`decide`; None when the class changes nothing
    (no test selects a general side at these sizes) or the tests are unusable."""
    if not isinstance(spec_tests, list) or not spec_tests or len(spec_tests) > MAX_TESTS:
        return None
    env = {f"n{k}": int(v) for k, v in enumerate(size_values)}
    bits, truth, drops_any = [], {}, False
    try:
        for item in spec_tests:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list) or len(item[1]) != 2:
                return None
            cond = decode(item[0])
            if not isinstance(cond, (K.Cmp, K.BoolOp)):
                return None
            v = bool(K.evaluate_int(cond, env))
            truth[cond] = v
            bits.append("1" if v else "0")
            drops_any |= item[1][0 if v else 1] is True
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    return ("".join(bits), truth) if drops_any else None


__all__ = ["MAX_TESTS", "version_tests", "decide", "encode", "decode", "spec_tests", "size_class"]
