"""Annotated GPU workloads: one folder per recipe, one module per variant (see contract.py)."""
