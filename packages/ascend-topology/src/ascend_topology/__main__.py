"""``python -m ascend_topology`` runs the CLI."""

import sys

from ascend_topology.cli import main

sys.exit(main())
