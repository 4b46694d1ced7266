# SPDX-License-Identifier: Apache-2.0
"""``python -m lmcache_device_kit.doctor``: the same as ``lmcache-device-doctor``.

Imports only ``cli``; runs only when executed as a module.
"""

# Local
from .cli import main

if __name__ == "__main__":
    main()
