"""The Spark runtime: session building, SQL translation and the per-query driver."""
