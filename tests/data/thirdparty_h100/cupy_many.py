"""CuPy calls that run cub and thrust (reductions, scans, sorts) and CuPy's own templated kernels."""
import cupy as cp
x = cp.random.default_rng(0).standard_normal(1 << 20)
i = cp.random.default_rng(1).integers(0, 1000, 1 << 20)
_ = x.sum(); _ = x.max(); _ = x.argmax(); _ = cp.cumsum(x); _ = cp.sort(x); _ = cp.argsort(x)
_ = cp.unique(i); _ = cp.sort(i); _ = cp.lexsort(cp.stack([x, x])); _ = cp.histogram(x, 10)
_ = cp.nonzero(x > 1); _ = cp.partition(x, 10); _ = cp.median(x); _ = x.astype(cp.float32).sum()
cp.cuda.Device().synchronize(); print("cupy_many done")
