"""``pypto sweep``: case files in, golden case folders and verdict rows out (docs/sweep.md).

``cases`` reads pypto's JSONL/CSV case files, ``msopst`` msOpST's JSON; ``tiles`` enumerates
legal tiles; ``unit`` is the one unit of work (``run_case``); ``local`` runs it in worker
processes (shards, resume, timeouts); ``cluster`` on a Dask cluster; ``results`` keeps the
rows (results.jsonl, merge, summary, CSV/xlsx).
"""
