"""The SQL front end: DeltaStream-dialect statements parsed (parse.py, dialect.py), split and cached (statements.py,
filecache.py), their SELECTs resolved against the relations' columns and typed (select.py, typecheck.py and the
type rules), and the shapes the engine runs recognised (aggregates, windows and temporal joins, changelog joins and
chains, unions, UNNEST, CTEs, expectations), and a resolved query lowered to its typed query plan (plan.py). Pure: no
files, no stores; the loader (dsflow/load/) hands it text and the relations it knows, and the Spark translator
(adapters/spark/translate.py) reads each query's plan (`plan.lower`), never parsing its SQL itself.
"""
