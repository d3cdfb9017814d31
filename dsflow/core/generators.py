"""The names of the data generators a `datagen` entry may ask for.

dsflow/datagen/ implements them (its `GENERATORS` has exactly these keys, which tests/unit/test_layers.py checks); the
loader checks a datagen's `generator` against this list without importing the generator process and the producer
it uses.
"""

from __future__ import annotations

GENERATOR_NAMES = ("pageviews", "users", "columns", "nexmark_bids", "nexmark_auctions", "nexmark_persons")
