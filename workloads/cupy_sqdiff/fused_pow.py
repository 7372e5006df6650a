"""Step 2a: ``cupy.fuse`` of the expression exactly as written, ``(x - y) ** 2``.

One kernel, no temporary: 24 bytes per element instead of the baseline's 40.
But outside ``fuse`` CuPy rewrites ``** 2`` into its ``square`` kernel, while
inside ``fuse`` the power ufunc is emitted as is, so each element pays a
float64 ``pow`` call. The first capture on an H200 showed this kernel at 65% of
the copy bandwidth while CuPy's own subtract kernel, which moves the same 24
bytes per element, ran at the copy bandwidth: the report's ncu section shows
where the time goes. The next step, ``fused``, writes the square as a product.
"""
from workloads.cupy_sqdiff.common import SquaredDifference, fused_kernel


def _squared_diff_pow(x, y):
    return (x - y) ** 2


def squared_diff_pow(a, b):
    return fused_kernel("cookbook_squared_diff_pow", _squared_diff_pow)(a, b)


class FusedPow(SquaredDifference):
    name = "fused_pow"
    summary = "@cupy.fuse of (x - y) ** 2 as written: one kernel, but a float64 pow per element"

    def compute(self, a, b):
        return squared_diff_pow(a, b)


VARIANT = FusedPow
