import sys

from workloads.cupy_sqdiff import RECIPE
from workloads.runner import main

sys.exit(main(RECIPE))
