"""Many cases at once: case files in, golden case folders and verdict rows out (docs/sweep.md).

- :func:`read_cases` reads pypto's JSONL / CSV case files and msOpST JSON for
  ``Conv2DBackpropInput`` into canonical case dicts (each with a stable ``id``);
- :func:`run_case` is the one unit of work: one case, one golden folder, one row (pure and
  deterministic; give it to ``distributed.Client.map``, a process pool or a Slurm task);
- :func:`run_sweep` runs many on this host (worker processes, shards, resume, timeouts) or on
  a Dask cluster, appending rows to ``results.jsonl``;
- :func:`judge_folder` judges a kernel output written into a case folder later.
"""

from ._sweep.cases import read_case_file, read_cases
from ._sweep.local import run_sweep, select_shard, shard_of
from ._sweep.results import merge, read_rows, summary
from ._sweep.unit import judge_folder, run_case

__all__ = [
    "read_cases",
    "read_case_file",
    "run_case",
    "run_sweep",
    "judge_folder",
    "select_shard",
    "shard_of",
    "read_rows",
    "merge",
    "summary",
]
