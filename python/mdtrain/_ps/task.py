"""`python -m mdtrain._ps.task`: run the worker or ps task TF_CONFIG names until the chief ends the job.

Exit status 0 only after the chief's shutdown: a task that cannot start (no job secret, a port
taken) or whose service ends otherwise exits 1, so an orchestrator (or LocalCluster's supervisor)
does not read it as finished.
"""
import logging
import sys

from mdtrain._ps.services import run_task_from_environment

_log = logging.getLogger("mdtrain")


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    try:
        run_task_from_environment()
    except Exception as e:  # noqa: B902 - logged with its traceback; the status says it failed
        _log.exception("task failed: %s: %s", type(e).__name__, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
