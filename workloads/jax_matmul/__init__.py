"""JAX matrix multiply, from the HPC-center guide "GPU Profiling, Optimization, and Debugging".

The seed's program, profiled with nsys::

    for size in [2**i for i in range(1, 10)]:
        A = jnp.arange(size**2).reshape(size, size)
        B = jnp.arange(size**2).reshape(size, size)
        C = A @ B

Nine int32 products of sides 2 .. 512, each dispatched eagerly: the seed's trace shows "a speckling
of small kernel executions" (a ``dot`` kernel of about 2 us). ``--size N`` is the largest side; every
variant runs the loop over 2, 4, ..., N, so all do the same work and N = 512 is the seed itself.

Recipe steps:
  baseline  the seed: eager jnp.arange inputs and A @ B, int32
  jit       the whole loop as one jax.jit program over inputs made once, int32
  float32   the same program on float32 inputs, precision=HIGHEST (true float32, no TF32)
  tf32      float32 data, TF32 inputs on the tensor cores (DotAlgorithmPreset.TF32_TF32_F32), float32 sums
  bf16      bfloat16 inputs, float32 accumulation (preferred_element_type): tensor cores

tf32 and bf16 both improve on float32 (two ways onto the tensor cores: keep float32 storage and
round inputs to TF32, or store bfloat16); bf16, the faster, is the last step.

The seed's other two lessons are here too: its capture range (cuProfilerStart/Stop around the
loop, ``nsys --capture-range=cudaProfilerApi``; workloads/profiler_range.py; the pipeline uses it
when ``nsys_profile.capture_range`` is on, off by default: it held the GPU ~3 s per nsys run) and its warning about
XLA's allocator (experiment ``allocator``: GPU memory and time under each allocator setting).
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="jax_matmul",
    title="JAX matrix multiply",
    seed_document="001",
    framework="jax",
    requires=("jax",),
    variants=("baseline", "jit", "float32", "tf32", "bf16"),
    # each step improves on the one listed before it, except:
    improves_on=(("bf16", "float32"),),
    default_size=512,
    size_meaning="largest matrix side N (a power of two): one product per side 2, 4, ..., N "
                 "(the seed's loop is N = 512)",
    experiments=("allocator",),
    sections=("dispatch", "rate", "allocator"),
    capture_range=True,
    # place in the reports and the index
    order=50,
    # each step compiles in setup (the eager baseline by running its loop once)
    compiles_in_setup=("baseline", "jit", "float32", "tf32", "bf16"),
    # the allocator settings run float32 at 8192 (exp_allocator's defaults), the programs that step's
    # timed run compiles: XLA autotuned them for ~17 s in each of the five processes (H200)
    experiments_from_cache=(("allocator", "float32", 8192),),
    # each setting's process takes its turn before JAX touches the GPU (its times are the calls';
    # its memory the allocator's): its start-up and nsys's report go on beside other runs' turns
    experiments_in_turns=("allocator",),
)
