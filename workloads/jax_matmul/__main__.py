import sys

from workloads.jax_matmul import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
