import sys

from runner.cli import main

if __name__ == "__main__":  # not in multiprocessing's children, which import this module as __mp_main__
    sys.exit(main())
