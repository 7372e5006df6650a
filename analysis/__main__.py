"""``python -m analysis <command>``: the command table lives in analysis/cli/main.py."""
import sys

from analysis.cli.main import main

if __name__ == "__main__":
    sys.exit(main(process_exits=True))
