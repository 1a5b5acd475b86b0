"""Scheduling: fusion into kernels, row fusion, splits (chunks.py), the plan's assembly."""
