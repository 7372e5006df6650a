import sys

from workloads.pycuda_kernel import RECIPE
from workloads.runner import main

sys.exit(main(RECIPE))
