import sys

from workloads.numba_ufunc import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
