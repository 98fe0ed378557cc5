"""Per-worker state: what a closure refers to on the chief and finds (or makes) on its worker.

On the chief a `PerWorkerResource` holds a creator (a callable); pickled for a worker it becomes
`(resource id, creator bytes or None)`, the bytes sent once per worker incarnation. On the worker,
`resolve` returns the object made by the creator the first time, and the same object afterwards
(so an iterator advances from closure to closure, as in TF).
"""
import uuid

from mdtrain._ps import wire


class PerWorkerResource:
    def __init__(self, creator):
        self._id = uuid.uuid4().hex
        self._creator = creator

    def _ps_reduce(self):
        return resolve, (self._id, wire.creator_for_target(self._id, self._creator))


def resolve(resource_id, creator_bytes):
    from mdtrain._ps.services import _state

    if resource_id in _state.resources:
        return _state.resources[resource_id]
    if creator_bytes is None:
        creator_bytes = _state.creators.get(resource_id)
        if creator_bytes is None:
            raise RuntimeError(f"worker {_state.task_index} lost per-worker resource {resource_id} and was not sent "
                               "how to make it again")
    _state.creators[resource_id] = creator_bytes
    obj = wire.loads(creator_bytes)()
    _state.resources[resource_id] = obj
    return obj
