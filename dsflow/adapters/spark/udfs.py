"""User-defined functions on Spark: each one the query calls, run as a pandas (Arrow) UDF registered in its session.

The user's function takes one row's values (None for NULL) and returns one value; it is called over each Arrow batch
of rows. Its module is loaded from its file (the project root on sys.path while it runs) under a name of its own,
and pickled by value, so Spark's Python workers run this very code without importing the project.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsflow.adapters.spark.spec import FunctionSpec
from dsflow.errors import DsflowError

SPARK_TYPES = {"VARCHAR": "string", "STRING": "string", "BIGINT": "bigint", "INT": "int", "SMALLINT": "smallint",
               "TINYINT": "tinyint", "DOUBLE": "double", "FLOAT": "float", "BOOLEAN": "boolean",
               "TIMESTAMP": "timestamp", "DATE": "date"}


def register_functions(spark, functions: list[FunctionSpec]) -> None:
    """Register each function under its SQL name (a temporary function of the session)."""
    from pyspark.rdd import PythonEvalType
    from pyspark.sql.functions import pandas_udf

    for spec in functions:
        with warnings.catch_warnings():  # "prefer type hints": they cannot say "any number of columns"
            warnings.simplefilter("ignore", UserWarning)
            udf = pandas_udf(vectorized(load_function(spec)), SPARK_TYPES[spec.returns.upper()],  # type: ignore[call-overload]
                             PythonEvalType.SQL_SCALAR_PANDAS_UDF)
        spark.udf.register(spec.name, udf)


def load_function(spec: FunctionSpec) -> Callable[..., Any]:
    """The user's function, from its module file as it is now; pickled by value (its module is registered so)."""
    from pyspark import cloudpickle

    name = f"dsflow_udf_{spec.name}_{spec.source_hash}"
    module = sys.modules.get(name)
    if module is None:
        now = hashlib.sha256(Path(spec.path).read_bytes()).hexdigest()[:16]
        if now != spec.source_hash:
            raise DsflowError("DSF-E444", f"function {spec.name}: its module {spec.path} changed since the query was "
                              "applied; the query runs the code it was planned with, or none",
                              hint="run `dsflow plan` and `dsflow apply`: the queries calling it restart with the new "
                                   "code")
        found = importlib.util.spec_from_file_location(name, spec.path)
        if found is None or found.loader is None:
            raise ImportError(f"function {spec.name}: cannot load {spec.path}")
        module = importlib.util.module_from_spec(found)
        root = str(_root(spec))
        sys.path.insert(0, root)
        try:
            found.loader.exec_module(module)
        finally:
            sys.path.remove(root)
        sys.modules[name] = module
        cloudpickle.register_pickle_by_value(module)
    return getattr(module, spec.function)


def _root(spec: FunctionSpec) -> Path:
    """The project root: the module file's folder, up one per dot of its module name (and one more for a package)."""
    path = Path(spec.path)
    depth = spec.module.count(".") + (1 if path.name == "__init__.py" else 0)
    return path.parents[depth]


def vectorized(function: Callable[..., Any]) -> Callable[..., Any]:
    """A pandas UDF body calling `function` once per row: NULL in as None, None out as NULL."""
    import pandas as pd

    def call(*columns):  # no hints: pandas_udf refuses to infer its kind from a *args signature
        values = [c.astype(object).where(c.notna(), None) for c in columns]
        return pd.Series([function(*row) for row in zip(*values, strict=True)], dtype=object)

    return call
