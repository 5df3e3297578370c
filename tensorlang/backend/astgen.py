"""isl AST (from ``AstBuild``) -> loop IR (paper Section 4.3, narrowed loops).

isl names the loop of schedule dimension ``k`` ``c<k>``; the schedule is
the identity on the block's dimensions, so ``c<k>`` is renamed to the
Python name of dimension ``k``.  A dimension isl fixed to one value has no
loop: the user statement's arguments then give its value, which becomes an
assignment (a single-point sum is no loop at all).
"""

from __future__ import annotations

import islpy as isl

from ..errors import UnsupportedError
from .loopir import Assign, If, Loop

_OP = isl.ast_expr_op_type
_BIN = {
    _OP.add: "+",
    _OP.sub: "-",
    _OP.mul: "*",
    _OP.fdiv_q: "//",
    _OP.pdiv_q: "//",
    _OP.pdiv_r: "%",
    _OP.zdiv_r: "%",
    _OP.eq: "==",
    _OP.le: "<=",
    _OP.lt: "<",
    _OP.ge: ">=",
    _OP.gt: ">",
    _OP.and_: "and",
    _OP.and_then: "and",
    _OP.or_: "or",
    _OP.or_else: "or",
}


def expr_code(e, rename: dict) -> str:
    """Signature: expr_code : isl.AstExpr -> Python source (integer arithmetic)."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return str(e.get_val().to_python())
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return rename.get(name, name)
    if t != isl.ast_expr_type.op:
        raise UnsupportedError(f"unexpected isl AST expression {e.to_C_str()}")
    op = e.get_op_type()
    args = [expr_code(e.get_op_arg(k), rename) for k in range(e.get_op_n_arg())]
    if op in _BIN:
        return f" {_BIN[op]} ".join(_wrap(a) for a in args)
    if op == _OP.minus:
        return f"-{_wrap(args[0])}"
    if op == _OP.max:
        return _fold("max", args)
    if op == _OP.min:
        return _fold("min", args)
    if op == _OP.div:  # exact division
        return f"{_wrap(args[0])} // {_wrap(args[1])}"
    if op in (_OP.cond, _OP.select):
        return f"({_wrap(args[1])} if {_wrap(args[0])} else {_wrap(args[2])})"
    raise UnsupportedError(f"unexpected isl AST operation {e.to_C_str()}")


def _wrap(code: str) -> str:
    """Parenthesise a compound operand (anything but a name, number or call)."""
    if " " not in code or (code.startswith(("max(", "min(")) and _balanced_call(code)):
        return code
    return f"({code})"


def _balanced_call(code: str) -> bool:
    depth = 0
    for k, ch in enumerate(code):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == ")" and k != len(code) - 1:
            return False
    return True


def _fold(fn, args):
    out = args[0]
    for a in args[1:]:
        out = f"{fn}({out}, {a})"
    return out


def to_loops(node, dims: list, body: list, kind: str) -> list:
    """Signature: to_loops : isl.AstNode -> [stmt].

    ``dims`` are the Python names of the schedule dimensions; ``body`` the
    statements of the user statement (shared by every copy isl makes).
    """
    rename = {f"c{k}": d for k, d in enumerate(dims)}
    return _node(node, rename, dims, body, kind)


def _node(node, rename, dims, body, kind) -> list:
    t = node.get_type()
    T = isl.ast_node_type
    if t == T.block:
        out = []
        kids = node.block_get_children()
        for k in range(kids.n_ast_node()):
            child = kids.get_at(k)
            out.extend(_node(child, rename, dims, body, kind))
        return out
    if t == T.mark:
        return _node(node.mark_get_node(), rename, dims, body, kind)
    if t == T.if_:
        then = _node(node.if_get_then_node(), rename, dims, body, kind)
        orelse = _node(node.if_get_else_node(), rename, dims, body, kind) if node.if_has_else_node() else []
        return [If(expr_code(node.if_get_cond(), rename), then, orelse)]
    if t == T.for_:
        it = node.for_get_iterator().get_id().get_name()
        var = rename.get(it, it)
        init = expr_code(node.for_get_init(), rename)
        inner = _node(node.for_get_body(), rename, dims, body, kind)
        if node.for_is_degenerate():
            return [Assign(var, init)] + inner
        cond = node.for_get_cond()
        inc = node.for_get_inc().get_val().to_python()
        op = cond.get_op_type()
        lhs = cond.get_op_arg(0)
        if op not in (_OP.le, _OP.lt) or lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != it:
            raise UnsupportedError(f"unexpected isl loop condition {cond.to_C_str()}")
        hi = expr_code(cond.get_op_arg(1), rename)
        if op == _OP.le:
            hi = f"{_wrap(hi)} + 1"
        return [Loop(var, init, hi, int(inc), inner, kind)]
    if t == T.user:
        call = node.user_get_expr()
        out = []
        for k in range(1, call.get_op_n_arg()):
            code = expr_code(call.get_op_arg(k), rename)
            if code != dims[k - 1]:
                out.append(Assign(dims[k - 1], code))
        return out + body
    raise UnsupportedError(f"unexpected isl AST node {node.to_C_str()}")
