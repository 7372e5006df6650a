import sys

from workloads.cupy_sqdiff import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
