import sys

from workloads.pycuda_kernel import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
