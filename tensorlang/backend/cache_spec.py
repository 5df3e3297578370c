"""Checking a cached kernel's spec against the program it claims to compile
(paper Section 4.3; issue 15: the cache is never a source of truth).

A spec (``tensorlang.backend.lower.lower_program``) says in which order the
kernel takes sizes, input leaves, relation arrays and temporaries, and how
its results form the program's value.  :func:`check_spec` derives what each
of those may be from the program alone (its inputs' names and types, its
sizes, its relations' arities, its result type) and raises :class:`BadEntry`
on the first disagreement, so an entry edited, truncated or copied from
another program is rebuilt instead of reading the wrong array or out of
bounds.
"""

from __future__ import annotations

from ..ir import PairT, RealT, TensorT, input_vars, relations_of, size_vars
from ..typecheck import type_of
from .results import array_leaves, scalar_leaves


class BadEntry(Exception):
    """A cache entry that must not be trusted (internal: it is rebuilt)."""


def _is(x, t) -> bool:
    return isinstance(x, t) and not isinstance(x, bool)


def _list(x, what: str) -> list:
    if not isinstance(x, list):
        raise BadEntry(f"{what} is not a list")
    return x


def _int(x, what: str, lo: int, hi: int) -> int:
    if not _is(x, int) or not lo <= x < hi:
        raise BadEntry(f"{what} is {x!r}, expected an int in [{lo}, {hi})")
    return x


def _leaf_rank(t, path, what: str) -> int:
    """Tensor rank of the real leaf reached by projecting ``t`` along ``path``."""
    for k in path:
        if not isinstance(t, PairT):
            raise BadEntry(f"{what}: path {path} projects a non-pair")
        t = t.fst if k == 0 else t.snd
    rank = 0
    while isinstance(t, TensorT):
        rank += 1
        t = t.elem
    if not isinstance(t, RealT):
        raise BadEntry(f"{what}: path {path} does not end at real values")
    return rank


def _soa(t):
    """The result type with tensors of pairs as pairs of tensors (the layout
    kernels return; ``_aos`` in the backend rebuilds the evaluator's form)."""
    if isinstance(t, PairT):
        return PairT(_soa(t.fst), _soa(t.snd))
    if isinstance(t, TensorT):
        el = _soa(t.elem)
        if isinstance(el, PairT):
            return PairT(_soa(TensorT(t.extent, el.fst)), _soa(TensorT(t.extent, el.snd)))
        return TensorT(t.extent, el)
    return t


def dim_at(dim, sizes: dict) -> int:
    """A spec's extent ``[[[size, coefficient], ...], const]`` (lower._extents) at ``sizes``."""
    terms, const = dim
    return const + sum(c * sizes[s] for s, c in terms)


def _check_dims(dims, sizes: set, what: str) -> None:
    for d in _list(dims, what):
        if not isinstance(d, list) or len(d) != 2 or not _is(d[1], int):
            raise BadEntry(f"{what}: {d!r} is not [terms, const]")
        for term in _list(d[0], what):
            if not isinstance(term, list) or len(term) != 2 or term[0] not in sizes or not _is(term[1], int):
                raise BadEntry(f"{what}: {term!r} is not [size, coefficient] over the program's sizes")


def check_spec(spec, program, mode) -> None:
    """Raise BadEntry unless ``spec`` fits ``program``'s signature."""
    if not isinstance(spec, dict):
        raise BadEntry("the spec is not an object")
    for field in ("sizes", "inputs", "relations", "outputs"):
        if field not in spec:
            raise BadEntry(f"the spec has no {field!r}")
    if mode is not None and spec.get("mode", mode) != mode:
        raise BadEntry(f"the spec is for mode {spec.get('mode')!r}, not {mode!r}")
    if not isinstance(spec.get("needs_positive_sizes", False), bool):
        raise BadEntry("needs_positive_sizes is not a boolean")

    rels = {r.name: r for r in relations_of(program)}
    size_names = {s.name for s in size_vars(program)}
    for r in rels.values():
        for a in r.extents:
            size_names |= {s.name for s in a.size_vars()}
    sizes = _list(spec["sizes"], "sizes")
    if len(set(map(str, sizes))) != len(sizes) or not all(isinstance(s, str) and s in size_names for s in sizes):
        raise BadEntry(f"sizes {sizes!r} are not distinct sizes of the program {sorted(size_names)}")

    ins = {v.name: v for v in input_vars(program)}
    seen = set()
    for item in _list(spec["inputs"], "inputs"):
        if not isinstance(item, list) or len(item) != 3:
            raise BadEntry(f"input {item!r} is not [name, path, rank]")
        name, path, rank = item
        if name not in ins:
            raise BadEntry(f"input {name!r} is not an input of the program {sorted(ins)}")
        path = tuple(_int(k, f"input {name} path", 0, 2) for k in _list(path, f"input {name} path"))
        if (name, path) in seen:
            raise BadEntry(f"input {name}{list(path)} appears twice")
        seen.add((name, path))
        want = _leaf_rank(ins[name].type, path, f"input {name}")
        if not _is(rank, int) or rank != want:
            raise BadEntry(f"input {name}{list(path)} has rank {rank!r}; its type {ins[name].type} says {want}")

    for item in _list(spec["relations"], "relations"):
        if not isinstance(item, list) or len(item) != 4 or item[0] not in rels:
            raise BadEntry(f"relation {item!r} is not [name, perm, ptrs, cols] of a program relation")
        name, perm, ptrs, cols = item
        arity = len(rels[name].extents)
        if sorted(_list(perm, "perm")) != list(range(arity)) or not all(_is(p, int) for p in perm):
            raise BadEntry(f"relation {name}: {perm!r} is not a permutation of its {arity} columns")
        for L in _list(ptrs, "ptrs"):
            _int(L, f"relation {name} ptr level", 0, arity + 1)
        for c in _list(cols, "cols"):
            _int(c, f"relation {name} column", 0, arity)
    for name in _list(spec.get("dense_relations", []), "dense_relations"):
        if name not in rels:
            raise BadEntry(f"dense relation {name!r} is not a relation of the program")

    leaves: list = []
    _check_layout(spec["outputs"], _soa(type_of(program)), leaves)
    if leaves != list(range(len(leaves))):
        raise BadEntry(f"result leaves {leaves} are not numbered 0..{len(leaves) - 1} in order")
    ranks = {}
    for name, path, rank in spec["inputs"]:
        ranks[(name, tuple(path))] = rank
    wit = set()
    for item in _list(spec.get("witnesses", []), "witnesses"):
        # [input, path, result index]: the scan this scalar result stands for (blas.py)
        if not isinstance(item, list) or len(item) != 3 or not _is(item[2], int):
            raise BadEntry(f"witness {item!r} is not [input, path, result index]")
        key = (item[0], tuple(_list(item[1], "witness path")))
        if ranks.get(key) != 2 or item[2] < len(leaves) or item[2] in wit:
            raise BadEntry(f"witness {item!r} is not a matrix input's own scalar after the results")
        wit.add(item[2])
    scalars = scalar_leaves(spec["outputs"], type_of(program))
    arrays = array_leaves(spec["outputs"], type_of(program))
    for item in _list(spec.get("strict_witnesses", []), "strict_witnesses"):
        # [input, result leaf, extents, leaf extents]: a result strict in every element of the
        # input (strict.py): a scalar (no leaf extents) or a dense array (its extents)
        if not isinstance(item, list) or len(item) != 4 or not isinstance(item[0], str) or not _is(item[1], int):
            raise BadEntry(f"strict witness {item!r} is not [input, result leaf, extents, leaf extents]")
        leaf = _list(item[3], "strict witness leaf extents")
        if (ranks.get((item[0], ())) or 0) < 1 or not (item[1] in scalars if not leaf else item[1] in arrays):
            raise BadEntry(f"strict witness {item!r} is not a tensor input and a scalar or dense array result")
        _check_dims(item[2], size_names, "strict witness")
        _check_dims(leaf, size_names, "strict witness leaf")
    for w in _list(spec.get("work", []), "work"):
        _check_dims(w, size_names, "work")
    for c in _list(spec.get("checks", []), "checks"):
        if not isinstance(c, list) or len(c) != 3 or not isinstance(c[2], str):
            raise BadEntry(f"check {c!r} is not [index, extent, access]")
        _check_dims([c[0], c[1]], size_names, "check")
    for field in ("temporaries", "output_arrays", "output_buffers"):
        for t in _list(spec.get(field, []), field):
            if not isinstance(t, list) or len(t) != 2 or not isinstance(t[0], str):
                raise BadEntry(f"{field} entry {t!r} is not [name, dims]")
            _check_dims(t[1], size_names, f"{field} entry {t[0]}")


def _check_layout(layout, t, leaves: list) -> None:
    if not isinstance(layout, list) or not layout:
        raise BadEntry(f"result layout {layout!r} is not a list")
    if isinstance(t, PairT):
        if layout[0] != "pair" or len(layout) != 3:
            raise BadEntry(f"result layout {layout!r} is not a pair, but the program returns {t}")
        _check_layout(layout[1], t.fst, leaves)
        _check_layout(layout[2], t.snd, leaves)
        return
    if layout[0] != "leaf" or len(layout) != 2 or not _is(layout[1], int):
        raise BadEntry(f"result layout {layout!r} is not a leaf, but the program returns {t}")
    leaves.append(layout[1])


def kernel_arity(spec) -> int:
    """Number of arguments the kernel takes according to ``spec``."""
    try:
        n = len(spec["sizes"]) + len(spec["inputs"])
        n += sum(len(r[2]) + len(r[3]) for r in spec["relations"])
        n += len(spec.get("dense_relations", [])) + len(spec.get("temporaries", []))
        n += len(spec.get("output_buffers", []))  # the output-buffer variant's (api.Kernel.out_variant)
        n += len(spec.get("sparse_values", [])) + len(spec.get("relation_orders", []))
    except (TypeError, KeyError, IndexError) as exc:
        raise BadEntry(f"the spec's argument lists are malformed ({exc})") from None
    return n
