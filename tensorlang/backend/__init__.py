"""Backend: isl domains -> loop IR -> Numba kernels (paper Section 4.3; issue 6).

``tl.compile(expr, mode="sparse"|"naive", threads=None)`` (``api.py``) returns a
``Kernel``: ``kernel(**inputs)`` validates the inputs and runs it,
``kernel.source`` is the generated Python, ``kernel.loop_ir`` the loop IR.

Pipeline: ``flatten.py`` (or ``tl.normalize``) brings a program to a let-block of
``gen[...] scalar`` bindings; ``fusion.py`` substitutes gathers, broadcasts and
single-use maps/products into their consumers (never adding work);
``lower.py`` builds each gen block and sum chain as an isl set
(``domains.py``), generates its loops with isl (``astgen.py``) into the loop IR
(``loopir.py``), proves every access in bounds, and iterates relations over
their sorted coordinates; ``codegen.py`` prints the Python source, and
``cache.py`` keeps it on disk for Numba's own cache.
"""
