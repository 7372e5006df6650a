import sys

from workloads.harness.runner import main
from workloads.warp_sph import RECIPE

sys.exit(main(RECIPE))
