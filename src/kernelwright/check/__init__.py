"""Checks shared by the harness, the tuner and the optimize sandbox: random inputs
(inputs.py) and the tolerance rule (tolerance.py)."""
