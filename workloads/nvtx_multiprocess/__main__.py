import sys

from workloads.nvtx_multiprocess.recipe import main

# spawned children import this file again as "__mp_main__": only the real entry point may run
if __name__ == "__main__":
    sys.exit(main())
