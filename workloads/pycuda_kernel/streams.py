"""Step 3 for data that must cross: chunks on several streams, so that the copies in both directions
overlap each other and the kernel.

``pinned_async`` queues the 1 GiB host-to-device copy, the kernel and the 1 GiB copy back on one
stream, each waiting for the one before: its measured limiter is the host link, and it takes 2.04×
the link's floor (the two directions one after the other). Here the arrays are cut into
``n_chunks`` pieces (default 8) and piece i's copy in, kernel and copy out go on stream
i % ``n_streams`` (default 3), from the same pinned buffers: while piece i is copied out, piece
i + 1 computes and piece i + 2 is copied in. The host link (PCIe, NVLink-C2C) is full duplex and the
GPU has a copy engine per direction, so the two directions can run at once. The kernel, its grid and
the device buffers are ``pinned_async``'s; only the order of the work changes.

Floor of the measured limiter (host link), both directions overlapped: max(1 GiB / pinned H2D rate,
1 GiB / pinned D2H rate), 19.4 ms on the H200 of the reference run (its D2H rate). What is left
above it: filling and draining the pipeline (the first piece's copy in and the last piece's copy
out run with nothing beside them, each 1/``n_chunks`` of one direction, and one piece's kernel,
~0.07 ms, sits between them), and whatever the two directions at once lose against each alone.

PREDICTION (written before the first measurement): 1.2× the floor with 8 pieces (range 1.15-1.3).
The model: the first piece's copy in and the last piece's copy out run alone (2/8 of one direction's
19.4 ms), the other 7/8 of each direction run together at ~1.09× their time alone (what Numba's
streams step measured on the H200: H2D 38.7 -> 41.5 ms, D2H 38.8 -> 42.4 ms when overlapped), so
19.4 × (2/8 + 7/8 × 1.09) = ~23.4 ms on an H200 (the ratio, not the time, carries over to an
H100), against ``pinned_async``'s 39.5 ms: ~1.7× faster.
nsys: the copies' summed time grows a little (~41 ms) while GPU busy falls to ~23.5 ms, so the
breakdown's "overlapping ms" is ~17 ms; 8 kernels per call instead of 1.

Measured on an H100 (NVIDIA H100 80GB HBM3): 24.11 ms per call (IQR 0.60 ms) against
``pinned_async``'s 39.92 ms, 1.66x faster; the pinned ceilings measured in the same session (H2D
54.7 GB/s, D2H 55.1 GB/s) give a host-link floor of 19.6 ms for 1 GiB each way, so the step runs at
1.23x it, as predicted. nsys: per call H2D 22.1 ms and D2H 21.1 ms overlapping for 19.4 ms, the 8
kernels 0.9 ms in all. More pieces shorten the unoverlapped ends: 4 pieces 26.2 ms, 8 24.3 ms, 16
22.96 ms (1.17x the floor); 2 streams instead of 3 cost nothing (24.35 ms).
"""
from __future__ import annotations

import numpy as np

from workloads.contract import WorkloadError
from workloads.pycuda_backend import PycudaEventPair, driver
from workloads.pycuda_kernel import kernels
from workloads.pycuda_kernel.pinned_async import PinnedAsync

#: pieces the arrays are cut into, and the streams they are dealt to
N_CHUNKS = 8
N_STREAMS = 3
#: every piece starts at a multiple of this many elements (4 KiB of float32): page-aligned copies
CHUNK_ALIGN_ELEMENTS = 1024


def chunk_bounds(size: int, chunks: int, align: int = CHUNK_ALIGN_ELEMENTS) -> list[tuple[int, int]]:
    """``[start, stop)`` of at most ``chunks`` consecutive pieces that cover ``0 .. size`` once, each
    starting at a multiple of ``align``; fewer pieces when ``size`` is under ``chunks * align``."""
    for what, value in (("size", size), ("chunks", chunks), ("align", align)):
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise WorkloadError(f"workloads/pycuda_kernel/streams.py: {what} must be a positive integer, got {value!r}")
    per = -(-size // chunks)
    per = -(-per // align) * align
    return [(start, min(start + per, size)) for start in range(0, size, per)]


class Streams(PinnedAsync):
    name = "streams"
    summary = (f"{N_CHUNKS} chunks over {N_STREAMS} streams: copies in, kernels and copies out of different "
               "chunks overlap")
    #: configurable by a subclass (or on the class before setup)
    n_chunks = N_CHUNKS
    n_streams = N_STREAMS

    def setup(self) -> None:
        if not (isinstance(self.n_streams, int) and self.n_streams > 0):
            raise WorkloadError(f"workloads/pycuda_kernel/streams.py: n_streams must be a positive integer, "
                                f"got {self.n_streams!r}")
        self.bounds = chunk_bounds(self.size, self.n_chunks)
        super().setup()  # pinned host buffers, whole-array device buffers, the kernel and its grid
        drv = driver()
        self.streams = [drv.Stream() for _ in range(self.n_streams)]
        # a prepared call takes the pieces' device addresses as plain integers
        self.kernel.prepare("PPQ")

    def step(self) -> None:
        drv = driver()
        in_base, out_base = int(self.d_in), int(self.d_out)
        itemsize = self.x_host.itemsize
        for i, (start, stop) in enumerate(self.bounds):
            stream = self.streams[i % len(self.streams)]
            offset_bytes = start * itemsize
            # one stream per piece orders its copy in, kernel and copy out; pieces on other streams
            # run beside them. Each piece has its own slice of the device buffers, so no two streams
            # ever touch the same bytes.
            drv.memcpy_htod_async(in_base + offset_bytes, self.x_host[start:stop], stream)
            self.kernel.prepared_async_call((self.blocks, 1), (kernels.THREADS, 1, 1), stream,
                                            out_base + offset_bytes, in_base + offset_bytes,
                                            np.uint64(stop - start))
            drv.memcpy_dtoh_async(self.out_host[start:stop], out_base + offset_bytes, stream)

    def synchronize(self) -> None:
        driver().Context.synchronize()

    def event_pair(self):
        # events on the legacy default stream: PyCUDA's streams are blocking streams, so the start
        # event precedes every piece of the call and the stop event follows them all
        return PycudaEventPair(None)

    def result(self) -> np.ndarray:
        self.synchronize()
        return self.out_host

    def teardown(self) -> None:
        super().teardown()
        self.streams = None


VARIANT = Streams
