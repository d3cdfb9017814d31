"""`python -m dsflow.datagen ...`: the generator process `dsflow apply` starts (dsflow/datagen/__init__.py)."""

import sys

from dsflow.datagen import main

sys.exit(main())
