# SPDX-License-Identifier: Apache-2.0
"""``python -m lmcache_device_kit.contract``: the contract runner (``runner.py``)."""

# Standard
import sys

# First Party
from lmcache_device_kit.contract.runner import main

if __name__ == "__main__":
    sys.exit(main())
