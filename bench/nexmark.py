"""The Nexmark generator used by the benchmarks; it lives in `dsflow.datagen.nexmark` so datagen can use it."""

from dsflow.datagen.nexmark import *  # noqa: F401,F403
from dsflow.datagen.nexmark import auction, bid, event, events, kind_of, nth_of_kind, person  # noqa: F401
