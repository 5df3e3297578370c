"""Rewriting passes of the paper, one module per figure (installed as tensorlang.passes)."""
