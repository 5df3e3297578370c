"""isl AST (from ``AstBuild``) -> loop IR (paper Section 4.3, narrowed loops).

isl names the loop of schedule dimension ``k`` ``c<k>``; the schedule is
the identity on the block's dimensions, so ``c<k>`` is renamed to the
kernel name of dimension ``k``.  A dimension isl fixed to one value has no
loop: the user statement's arguments then give its value, which becomes an
assignment (a single-point sum is no loop at all).  isl expressions become
kernel-IR nodes (``kir.py``); an integer literal outside int64 is refused.
"""

from __future__ import annotations

from ..isl_bridge import isl

from ..errors import UnsupportedError
from . import kir as K
from .loopir import Assign, If, Loop

_OP = isl.ast_expr_op_type
_INT = {_OP.add: "+", _OP.sub: "-", _OP.mul: "*", _OP.fdiv_q: "//", _OP.pdiv_q: "//", _OP.pdiv_r: "%", _OP.zdiv_r: "%", _OP.div: "//"}
_CMP = {_OP.eq: "==", _OP.le: "<=", _OP.lt: "<", _OP.ge: ">=", _OP.gt: ">"}
_BOOL = {_OP.and_: "and", _OP.and_then: "and", _OP.or_: "or", _OP.or_else: "or"}


def int_literal(v: int) -> K.Int:
    if abs(v) > K.INT64_MAX:
        raise UnsupportedError(
            f"the integer {v} in a loop bound or guard does not fit int64 even with sizes bounded at call time"
        )
    return K.Int(v)


def expr_of(e, rename: dict) -> K.KExpr:
    """Signature: expr_of : isl.AstExpr -> kernel-IR integer/boolean expression."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return int_literal(int(e.get_val().to_python()))
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return K.Name(rename.get(name, name))
    if t != isl.ast_expr_type.op:
        raise UnsupportedError(f"unexpected isl AST expression {e.to_C_str()}")
    op = e.get_op_type()
    args = [expr_of(e.get_op_arg(k), rename) for k in range(e.get_op_n_arg())]
    if op in _INT:
        out = args[0]
        for a in args[1:]:
            out = K.IBin(_INT[op], out, a)
        return out
    if op in _CMP:
        return K.Cmp(_CMP[op], args[0], args[1])
    if op in _BOOL:
        return K.BoolOp(_BOOL[op], tuple(args))
    if op == _OP.minus:
        return K.IBin("-", K.Int(0), args[0])
    if op in (_OP.max, _OP.min):
        return K.MinMax("max" if op == _OP.max else "min", tuple(args))
    if op in (_OP.cond, _OP.select):
        return K.Select(args[0], args[1], args[2])
    raise UnsupportedError(f"unexpected isl AST operation {e.to_C_str()}")


def isl_text(e: K.KExpr, names: set):
    """The isl affine text of the kernel-IR integer expression ``e`` (the
    inverse of :func:`expr_of` on affine expressions with ``//`` by a positive
    constant, ``min``, ``max``) over the Names ``names``, or None when ``e``
    is not such an expression (a product of two unknowns, ``%``, a load)."""
    match e:
        case K.Int(value=v):
            return str(v)
        case K.Name(name=n):
            return n if n in names else None
        case K.IBin(op="//", lhs=a, rhs=K.Int(value=d)) if d > 0:
            a = isl_text(a, names)
            return None if a is None else f"floor(({a})/{d})"
        case K.IBin(op=("+" | "-") as op, lhs=a, rhs=b):
            a, b = isl_text(a, names), isl_text(b, names)
            return None if a is None or b is None else f"({a} {op} {b})"
        case K.IBin(op="*", lhs=a, rhs=b) if isinstance(a, K.Int) or isinstance(b, K.Int):
            a, b = isl_text(a, names), isl_text(b, names)
            return None if a is None or b is None else f"({a} * {b})"
        case K.MinMax(fn=fn, args=args) if args:
            got = [isl_text(x, names) for x in args]
            if None in got:
                return None
            out = got[0]
            for x in got[1:]:
                out = f"{fn}({out}, {x})"
            return out
    return None


def to_loops(node, dims: list, body: list, kind: str, sched: list = None) -> list:
    """Signature: to_loops : isl.AstNode -> [stmt].

    ``dims`` are the kernel names of the statement's dimensions; ``sched``
    those of the schedule dimensions (``dims`` when the schedule is the
    identity; interchanged or tiled schedules, domains.schedule_dims, name
    them apart); ``body`` the
    statements of the user statement (shared by every copy isl makes), or a
    dict of them by isl statement name (separate.py's interior and boundary).
    """
    rename = {f"c{k}": d for k, d in enumerate(sched if sched is not None else dims)}
    body = {k: tuple(v) for k, v in body.items()} if isinstance(body, dict) else tuple(body)
    return _node(node, rename, dims, body, kind)


def _node(node, rename, dims, body, kind) -> list:
    t = node.get_type()
    T = isl.ast_node_type
    if t == T.block:
        out = []
        kids = node.block_get_children()
        for k in range(kids.n_ast_node()):
            out.extend(_node(kids.get_at(k), rename, dims, body, kind))
        return out
    if t == T.mark:
        return _node(node.mark_get_node(), rename, dims, body, kind)
    if t == T.if_:
        then = _node(node.if_get_then_node(), rename, dims, body, kind)
        orelse = _node(node.if_get_else_node(), rename, dims, body, kind) if node.if_has_else_node() else []
        return [If(expr_of(node.if_get_cond(), rename), tuple(then), tuple(orelse))]
    if t == T.for_:
        it = node.for_get_iterator().get_id().get_name()
        var = rename.get(it, it)
        init = expr_of(node.for_get_init(), rename)
        inner = _node(node.for_get_body(), rename, dims, body, kind)
        if node.for_is_degenerate():
            return [Assign(var, init)] + inner
        cond = node.for_get_cond()
        inc = int(node.for_get_inc().get_val().to_python())
        op = cond.get_op_type()
        lhs = cond.get_op_arg(0)
        if op not in (_OP.le, _OP.lt) or lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != it:
            raise UnsupportedError(f"unexpected isl loop condition {cond.to_C_str()}")
        hi = expr_of(cond.get_op_arg(1), rename)
        if op == _OP.le:
            hi = K.int_add(hi, K.Int(1))
        return [Loop(var, init, hi, inc, tuple(inner), kind)]
    if t == T.user:
        call = node.user_get_expr()
        out = []
        for k in range(1, call.get_op_n_arg()):
            code = expr_of(call.get_op_arg(k), rename)
            if code != K.Name(dims[k - 1]):
                out.append(Assign(dims[k - 1], code))
        if isinstance(body, dict):
            return out + list(body[call.get_op_arg(0).get_id().get_name()])
        return out + list(body)
    raise UnsupportedError(f"unexpected isl AST node {node.to_C_str()}")
