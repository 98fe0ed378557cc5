"""`python -m mdtrain._ps.task`: run the worker or ps task TF_CONFIG names until the chief ends the job."""
import logging
import sys

from mdtrain._ps.services import run_task_from_environment

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    run_task_from_environment()
