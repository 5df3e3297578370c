"""Executable proof obligations for every numbered rule of the paper.

One obligation per rule (Figures 6-17 of "Differentiating A Tensor
Language", see ../shared/paper/RULES.md) and per theorem (6.1, 6.55); see
proofs/README.md for the table and the arguments, and ``python -m proofs``
to run them (``--quick`` for the CI subset).
"""
