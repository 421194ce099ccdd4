"""Backends: where array data lives and the loops that run on it.

``native_kernels`` holds fused CPU loops (Cython, over contiguous float32 and
float64 data) for the elementwise forward and backward formulas that NumPy
would otherwise run as several passes with temporaries.
"""
