"""A discrete-event replay of one training step: tasks on resources (devices, links, a device's
communication stream, a parameter server), each resource running its tasks in the order the code
issues them, each task starting when its resources are free and its dependencies are done.

Nothing here knows a strategy: steps.py writes each strategy's step as tasks (the pipeline's op
lists are the executor's own, from the core). Overlap and pipeline bubbles are what this replay
gives, not a formula: a bucket's all-reduce on a communication stream overlaps the backward tasks
after it; a pipeline stage waiting on a receive is idle."""
import collections
import dataclasses

COMPUTE, COMMUNICATION, UPDATE = "compute", "communication", "update"


@dataclasses.dataclass(eq=False)
class Task:
    name: str
    resources: tuple         # every resource it holds for its whole duration
    duration: float
    deps: tuple = ()
    category: str = COMPUTE
    start: float = None
    end: float = None


class Simulator:
    """Add tasks in program order (per resource), then run()."""

    def __init__(self):
        self.tasks = []
        self._queues = collections.OrderedDict()

    def add(self, name, resources, duration, deps=(), category=COMPUTE):
        if isinstance(resources, str):
            resources = (resources,)
        if duration < 0:
            raise ValueError(f"simulate: task {name} has a negative duration {duration}")
        task = Task(name, tuple(resources), float(duration), tuple(d for d in deps if d is not None), category)
        self.tasks.append(task)
        for r in task.resources:
            self._queues.setdefault(r, collections.deque()).append(task)
        return task

    def run(self):
        """Schedules every task; returns a Timeline. RuntimeError on a deadlock (a task whose
        dependency can never run: the task lists disagree about an order)."""
        free = {r: 0.0 for r in self._queues}
        queues = {r: collections.deque(q) for r, q in self._queues.items()}
        left = len(self.tasks)
        while left:
            progressed = False
            for r in list(queues):
                q = queues[r]
                while q:
                    t = q[0]
                    if not all(queues[o] and queues[o][0] is t for o in t.resources):
                        break
                    if not all(d.end is not None for d in t.deps):
                        break
                    t.start = max([free[o] for o in t.resources] + [d.end for d in t.deps])
                    t.end = t.start + t.duration
                    for o in t.resources:
                        queues[o].popleft()
                        free[o] = t.end
                    left -= 1
                    progressed = True
            if not progressed:
                stuck = [q[0].name for q in queues.values() if q][:5]
                raise RuntimeError(f"simulate: deadlock, waiting tasks: {stuck}")
        return Timeline(self.tasks)


class Timeline:
    def __init__(self, tasks):
        self.tasks = tasks
        self.makespan = max((t.end for t in tasks), default=0.0)

    def busy(self, resource, category=None):
        return sum(t.duration for t in self.tasks
                   if resource in t.resources and (category is None or t.category == category))
