"""How far ``mycalculation`` evaluated in float32 can be from its float64 value: the tolerance of the
float32 steps, derived from float32's unit roundoff and the body's condition.

The body, one operation per line, with the relative error each step adds (first order; u = 2^-24,
float32's unit roundoff; an error of k ulp is at most 2k u relative, since ulp(y) <= 2^-23 |y|):

    s = x ** 2              rounded product: u
    a = sin(s)              absolute error |s| u (the rounding of s, through |cos| <= 1) plus the sine's own
    b = exp(-a)             relative error = a's absolute error, plus the exponential's own
    c = sqrt(|x|)           the square root's own
    t = tanh(x)             the tanh's own
    d = c * t               rho_c + rho_t + u
    e = b / d               rho_b + rho_d + the division's own
    f = sqrt(|e|)           rho_e / 2 + the square root's own

x is exact (the float32 input), and the reference is the float64 body on the same float32 values, so
the only errors are the float32 evaluation's. The condition of the body enters through ``sin(x**2)``:
its absolute error grows with s = x^2, so the bound grows with x^2. Every element's relative error
is at most the bound at the largest |x|, and so is the relative norm ``||out - ref|| / ||ref||`` the
check takes (||out - ref|| <= max_i |rel_i| ||ref||). The fill kernel draws |x| <= 7.434 (its
Box-Muller floor, body.FILL_MAX_ABS), so the bound there is the tolerance.

Per-operation errors:

* ``float32`` (libdevice, IEEE division and square root): sinf, expf, tanhf 2 ulp each (the CUDA
  Programming Guide's single-precision table), sqrtf, x/y and x*y correctly rounded (0.5 ulp, u).
  Bound: (x^2 / 2 + 8.5) u; 36.1 u = 2.15e-6 at |x| = 7.434.
* ``fastmath`` (``sin.approx``, ``ex2.approx``, ``tanh.approx``, ``sqrt.approx``, ``div.approx``):
  ``__sinf``'s 2^-21.41 absolute error on [-pi, pi] (the Guide's intrinsic table) plus s u for the
  argument's reduction by 2 pi in float32 (s reaches 55 here); ``__expf``'s 2 + floor(1.173 |a|) = 3
  ulp (|a| <= 1); ``__fdividef`` 2 ulp; ``sqrt.approx`` taken as 2 ulp. ``tanh.approx.f32`` has no
  intrinsic in the Guide's table and no ulp bound there: it is taken as 2^-11 relative, about 11
  correct bits, looser than anything reported for the instruction (about 16 bits). That assumption
  dominates: x^2 u + 2^-22.41 + 2^-12 + 11.5 u, 2.49e-4 at |x| = 7.434.

Measured on the CPU (Numba's float32 CPU ufunc of the same body, 2 M standard-normal samples, glibc's
float32 functions; tests/test_numba_ufunc.py): relative norm error 2.6e-8 (0.44 u), every element
under 0.42 of its own bound; so the ``float32`` tolerance sits about 80x above the measured norm error:
the bound is the worst element's (|x| = 7.4), while the norm is set by the elements near x = 0, where
f(x) ~ |x|^-3/4 is largest and the bound is 8.5 u. The CPU has no counterpart of the approximate
instructions (Numba's CPU ``fastmath`` keeps the library calls: 2.7e-8 measured), so the GPU run's check
is what measures ``fastmath``'s error.
"""
from __future__ import annotations

import numpy as np

#: float32's unit roundoff (round to nearest): half the spacing of float32 numbers in [1, 2)
UNIT_ROUNDOFF = 2.0 ** -24
#: relative error of an operation k ulp off: ulp(y) <= 2^-23 |y| = 2 u |y|
ULP = 2.0 * UNIT_ROUNDOFF

#: libdevice's float32 functions (CUDA Programming Guide, single-precision functions), in ulp
LIBDEVICE_SIN_ULP = 2.0
LIBDEVICE_EXP_ULP = 2.0
LIBDEVICE_TANH_ULP = 2.0
#: the approximate instructions ``fastmath`` selects
FAST_SIN_ABS = 2.0 ** -21.41  # __sinf on [-pi, pi], absolute
FAST_EXP_ULP = 3.0  # __expf: 2 + floor(1.173 |a|) ulp, |a| <= 1
FAST_DIV_ULP = 2.0  # __fdividef
FAST_SQRT_ULP = 2.0  # sqrt.approx.f32: assumed, as __fdividef
FAST_TANH_REL = 2.0 ** -11  # tanh.approx.f32: assumed (see the module doc)


def relative_error_bound(abs_x, fastmath: bool = False):
    """First-order bound on |f32(f(x)) - f(x)| / |f(x)| for inputs with |x| = ``abs_x`` (a number or an
    array), following the operations in the module doc."""
    u = UNIT_ROUNDOFF
    s = np.square(np.asarray(abs_x, dtype=np.float64))
    rho_s = u
    if fastmath:
        delta_a = s * rho_s + s * u + FAST_SIN_ABS  # + the 2 pi reduction's rounding
        rho_b = delta_a + FAST_EXP_ULP * ULP
        rho_c = FAST_SQRT_ULP * ULP
        rho_t = FAST_TANH_REL
        rho_div, rho_sqrt = FAST_DIV_ULP * ULP, FAST_SQRT_ULP * ULP
    else:
        delta_a = s * rho_s + LIBDEVICE_SIN_ULP * ULP  # |a| <= 1: k ulp of a are at most 2 k u absolute
        rho_b = delta_a + LIBDEVICE_EXP_ULP * ULP
        rho_c = u
        rho_t = LIBDEVICE_TANH_ULP * ULP
        rho_div, rho_sqrt = u, u
    rho_d = rho_c + rho_t + u
    rho_e = rho_b + rho_d + rho_div
    bound = rho_e / 2.0 + rho_sqrt
    return float(bound) if np.ndim(bound) == 0 else bound


def tolerance(max_abs_x: float, fastmath: bool = False) -> float:
    """The check's tolerance for inputs with |x| <= ``max_abs_x``: the bound at the largest |x| (the
    bound grows with |x|), which also bounds the relative norm the check takes."""
    return relative_error_bound(max_abs_x, fastmath)
