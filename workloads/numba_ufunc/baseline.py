"""Baseline, exactly as the seed: the CUDA ufunc called on a pageable host NumPy array.

Numba copies the input to the device, runs the kernel and copies the result back, all
synchronously and through pageable memory, which the driver stages through its own pinned buffer:
on the seed's V100, 37.8% host-to-device, 0.5% kernel, 62.2% device-to-host. The report puts the
split on this GPU beside it.
"""
from workloads.numba_ufunc import body
from workloads.numba_ufunc.common import HostDataUfunc


class Baseline(HostDataUfunc):
    name = "baseline"
    summary = "the KAUST page's @vectorize(target='cuda') on a pageable host array: copies in, kernel, copies out"

    def step(self) -> None:
        self.out = body.cuda_ufunc()(self.x)


VARIANT = Baseline
