"""A sweep on a Dask distributed cluster: ``Client.map`` of ``run_case``, rows streamed back.

Dask is an optional extra (``pip install "pypto[cluster]"``), imported only here and only
when a sweep names a scheduler. The workers need pypto installed and ``out_dir`` reachable at
the same path (a shared file system, or one host). The scheduler retries the cases of a
worker that dies (its ``allowed_failures``, 3 by default); ``run_case`` itself never raises.
"""

import uuid

from ..error import FeError
from .unit import _empty_row, run_case

__all__ = ["run_on_cluster", "import_distributed"]


def import_distributed():
    try:
        import distributed
    except ImportError:
        raise FeError(
            ImportError(
                '--scheduler needs Dask: pip install "pypto[cluster]" (dask and distributed)'
            )
        ) from None
    return distributed


def _local_cluster(distributed, workers):
    """N worker processes on loopback, one thread each, no dashboard."""
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )


def run_on_cluster(todo, out_dir, scheduler, threads, standard, keep, emit):
    """Run ``todo`` on the cluster of ``scheduler`` ("tcp://HOST:PORT", "local:N" or a
    Client) and ``emit`` each row as it finishes."""
    distributed = import_distributed()
    cluster = client = None
    try:
        if isinstance(scheduler, distributed.Client):
            client = scheduler
        elif isinstance(scheduler, str) and scheduler.startswith("local:"):
            cluster = _local_cluster(distributed, int(scheduler.split(":", 1)[1]))
            client = distributed.Client(cluster)
        else:
            try:
                client = distributed.Client(scheduler, timeout="30s")
            except OSError as exc:
                raise FeError(
                    OSError(f"--scheduler {scheduler}: cannot reach the scheduler: {exc}")
                ) from None
        if not todo:
            return
        token = uuid.uuid4().hex[:8]  # this sweep's task keys: never a result of another run
        futures = client.map(
            run_case,
            todo,
            out_dir=out_dir,
            threads=threads,
            standard=standard,
            keep=keep,
            key=[f"pypto-sweep-{token}-{case['id']}" for case in todo],
            pure=False,
        )
        by_key = {future.key: case for future, case in zip(futures, todo)}
        for future in distributed.as_completed(futures):
            try:
                row = future.result()
            except Exception as exc:  # noqa: BLE001 - e.g. KilledWorker: the case's row says so
                row = _empty_row(by_key[future.key])
                row["reason"] = f"on the cluster: {type(exc).__name__}: {exc}"
            emit(row)
            future.release()
    finally:
        if client is not None and client is not scheduler:
            client.close()
        if cluster is not None:
            cluster.close()
