"""Step 2: chunks on several streams, so that copies in both directions overlap the kernel.

While chunk i computes, chunk i+1 is copied in and chunk i-1 is copied out; the two copy
directions use separate copy engines and run at the same time. Predicted: the call takes about
the slower direction alone, max(2 GiB / H2D, 2 GiB / D2H), plus one chunk's copy to start and
one to finish. Written with a ``@cuda.jit`` kernel (rather than the ufunc) so that the CUDA
simulator can run this exact code in the CPU tests.
"""
from workloads.numba_ufunc import body
from workloads.numba_ufunc.common import HostDataUfunc

N_STREAMS = 3
N_CHUNKS = 16


class Streams(HostDataUfunc):
    name = "streams"
    summary = f"{N_CHUNKS} chunks over {N_STREAMS} streams: H2D, kernel and D2H of different chunks overlap"
    pinned_host = True

    def setup(self) -> None:
        from numba import cuda

        super().setup()
        self.streams = [cuda.stream() for _ in range(N_STREAMS)]
        chunk = -(-self.size // N_CHUNKS)
        self.bounds = [(a, min(a + chunk, self.size)) for a in range(0, self.size, chunk)]
        # one pair of device buffers per stream, reused by every chunk that stream handles
        self.d_in = [cuda.device_array(chunk, dtype="float64") for _ in self.streams]
        self.d_out = [cuda.device_array(chunk, dtype="float64") for _ in self.streams]

    def step(self) -> None:
        kernel = body.cuda_kernel()
        for i, (a, b) in enumerate(self.bounds):
            k = i % N_STREAMS
            s, n = self.streams[k], b - a
            d_in, d_out = self.d_in[k][:n], self.d_out[k][:n]
            d_in.copy_to_device(self.x[a:b], stream=s)
            blocks, threads = body.launch_config(n)
            kernel[blocks, threads, s](d_in, d_out)
            d_out.copy_to_host(self.out[a:b], stream=s)

    def teardown(self) -> None:
        super().teardown()
        self.d_in = self.d_out = self.streams = None


VARIANT = Streams
