import sys

from workloads.cudf_groupby import RECIPE
from workloads.runner import main

sys.exit(main(RECIPE))
