"""Predicates -> kernel-IR booleans (paper Section 4.3; Fig. 4 rules 4.12-4.17).

A mixin of :class:`~tensorlang.backend.lower.Lowerer` (split out of lower.py):
an Iverson bracket's predicate that does not narrow the loops around it is
tested in the loop body.  Affine parts are decided or simplified by isl
against what the scope already knows; a relation conjunct reads the
relation's dense boolean table, or is true outright inside a loop that runs
over exactly its non-zeros; ``exists`` is a search loop with an early exit
(or a relation-driven one, relations.py).
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Aff, And, BoolLit, Cmp, Exists, Or, Rel, conj
from . import kir as K
from .domains import Scope, aff_expr, affine_test, has_rel, in_range
from .loopir import Assign, Break, If, Loop
from .relations import tidy


class PredicateLowering:
    def pred_code(self, p, sc: Scope):
        """Signature: pred_code : Pred -> ([stmt], kernel-IR boolean).

        Affine parts are simplified by isl against what the scope already
        knows (``gist``), so a bracket implied by the loop bounds costs nothing."""
        if self.mode == "sparse" and isinstance(p, (Or, Exists)):
            p = tidy(p)
        if not has_rel(p):
            got = affine_test(sc, p)
            if got is not None:
                return [], got
        match p:
            case BoolLit(value=v):
                return [], K.Bool(v)
            case Cmp(op=op, lhs=a, rhs=b):
                return [], K.Cmp(op, aff_expr(a, sc), aff_expr(b, sc))
            case And(lhs=a, rhs=b):
                s1, c1 = self.pred_code(a, sc)
                if c1 == K.Bool(False):
                    return s1, c1
                s2, c2 = self.pred_code(b, sc.child(cons=[sc.pred(a)]) if not has_rel(a) else sc)
                return s1 + s2, K.and_of([c1, c2])
            case Or(lhs=a, rhs=b):
                s1, c1 = self.pred_code(a, sc)
                if c1 == K.Bool(True):
                    return s1, c1
                s2, c2 = self.pred_code(b, sc)
                return s1 + s2, K.or_of([c1, c2])
            case Rel(rel=r, args=args) if any(
                d.rel is r and all(a is b for a, b in zip(d.args, args)) for d, _, _, _ in self.drivers
            ):
                return [], K.Bool(True)  # the loop around runs over exactly these non-zeros
            case Rel(rel=r, args=args):
                # a test reads the relation's dense boolean table (built anyway
                # when the inputs are validated); out of range reads as false
                if r not in self.dense_rels:
                    self.dense_rels.append(r)
                rng = [
                    in_range(aff_expr(a, sc), aff_expr(n, sc))
                    for a, n in zip(args, r.extents)
                    if affine_test(sc, conj(Cmp("<=", Aff((), 0), a), Cmp("<", a, n))) != K.Bool(True)
                ]
                look = K.Load(f"{self.rel_name(r, ())}_d", tuple(aff_expr(a, sc) for a in args))
                return [], K.and_of(rng + [look])
            case Exists(var=i, extent=n, body=b) if self.mode == "sparse" and self._exists_driver(i, b) is not None:
                return self._exists_driven(i, n, b, sc)
            case Exists(var=i, extent=n, body=b):
                ex = self.local()
                v = self.names.new("index")
                inner = sc.child({i: v}, params=[v], cons=[f"0 <= {v} < {sc.aff(n)}"])
                bs, bc = self.pred_code(b, inner)
                found = If(bc, (Assign(ex, K.Bool(True)), Break()))
                loop = Loop(v, K.Int(0), aff_expr(n, sc), 1, tuple(bs + [found]), "exists")
                return [Assign(ex, K.Bool(False)), loop], K.Name(ex)
            case _:
                raise UnsupportedError(f"not a predicate: {p!r}")




__all__ = ["PredicateLowering"]
