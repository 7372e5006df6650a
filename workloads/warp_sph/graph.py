"""Step 1: the hash grid reserved once and each frame's 40 substeps captured in one CUDA graph.

Setup reserves the grid's buffers for ``size`` points (``HashGrid.reserve``), loads the kernel
module, and records one frame inside ``wp.ScopedCapture``; ``step()`` resets the state (two
copies) and replays the frame with one ``wp.capture_launch``. Kernels and bytes are unchanged:
what goes is the host's part, 240 Python calls per frame (five ``wp.launch`` and one
``HashGrid.build`` per substep, which issue ~12 CUDA operations: Warp's two grid kernels, cub's
radix-sort kernels, two memsets, the five kernels), and the gaps they leave between kernels.

Prediction: the frame takes the sum of its kernels' GPU times plus about a microsecond per graph
node; against the baseline it gains what nsys shows as idle GPU time between kernels in a frame
(the host issued launches more slowly than the short kernels ran). A graph launch is a single
activity to ``wp.ScopedTimer``; nsys needs ``--cuda-graph-trace=node`` to show its kernels.

CUDA graphs exist only on CUDA devices. On Warp's CPU device, Warp 1.19 records the same
operations into its own capture and replays them from C++ (``frame_mode`` says which ran); a Warp
without CPU capture runs the plain launches instead.
"""
from workloads.warp_sph.common import SphFrame


class Graph(SphFrame):
    name = "graph"
    summary = "hash grid reserved once; each frame's 40 substeps replayed as one CUDA graph"
    use_graph = True


VARIANT = Graph
