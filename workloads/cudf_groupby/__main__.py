import sys

from workloads.cudf_groupby import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
