"""A discrete-event replay of one training step: tasks on resources (devices, links, a device's
communication stream, a parameter server), each resource running its tasks in the order the code
issues them, each task starting when its resources are free and its dependencies are done.

Nothing here knows a strategy: the pricers turn the core's StepPlan of a strategy into tasks
(price_plan.py a data-parallel one, price_tensor_parallel.py ModelParallel's, price_pipeline.py a
pipeline's, price_parameter_servers.py a parameter-server worker's). Overlap and pipeline bubbles
are what this replay gives, not a formula: a bucket's all-reduce on a communication stream overlaps the backward tasks
after it; a pipeline stage waiting on a receive is idle.

Contention: a task may carry a second duration, `shared_duration`, what it takes while other
cores compute at once (measured: profile.py times each layer alone and while every core runs a
copy). The replay first runs every task at its alone duration, then gives each such task the
shared duration for the share of its span that overlaps another such task on other resources, and
replays again, until the durations settle: replicas in lockstep pay the shared rate throughout, a
pipeline stage in its fill or drain (the other stage idle) the alone rate."""
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
    shared_duration: float = None  # while other cores compute at once (None: no contention)
    start: float = None
    end: float = None
    alone_duration: float = None   # the duration as added (`duration` is the replayed one)


class Simulator:
    """Add tasks in program order (per resource), then run()."""

    def __init__(self):
        self.tasks = []
        self._queues = collections.OrderedDict()

    def add(self, name, resources, duration, deps=(), category=COMPUTE, shared_duration=None):
        if isinstance(resources, str):
            resources = (resources,)
        if duration < 0 or (shared_duration is not None and shared_duration < 0):
            raise ValueError(f"simulate: task {name} has a negative duration {duration} / {shared_duration}")
        task = Task(name, tuple(resources), float(duration), tuple(d for d in deps if d is not None), category,
                    None if shared_duration is None else float(shared_duration))
        task.alone_duration = task.duration
        self.tasks.append(task)
        for r in task.resources:
            self._queues.setdefault(r, collections.deque()).append(task)
        return task

    def run(self, rounds=8, tolerance=1e-3):
        """Schedules every task; returns a Timeline. RuntimeError on a deadlock (a task whose
        dependency can never run: the task lists disagree about an order). Tasks with a shared
        duration are replayed again (at most `rounds` times) until no duration moves by more than
        `tolerance` of itself."""
        contending = [t for t in self.tasks if t.shared_duration is not None]
        self._schedule()
        for _ in range(rounds if contending else 0):
            moved = 0.0
            for t in contending:
                d = t.alone_duration + (t.shared_duration - t.alone_duration) * _overlap(t, contending)
                moved = max(moved, abs(d - t.duration) / max(d, 1e-30))
                t.duration = d
            if moved <= tolerance:
                break
            self._schedule()
        return Timeline(self.tasks)

    def _schedule(self):
        for t in self.tasks:
            t.start = t.end = None
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


def _overlap(task, others):
    """The share of `task`'s span during which another of `others` holding none of its resources
    (another core) runs."""
    if task.end <= task.start:
        return 0.0
    own = set(task.resources)
    spans = sorted((max(o.start, task.start), min(o.end, task.end)) for o in others
                   if o is not task and o.end > task.start and o.start < task.end and not own & set(o.resources))
    covered, reach = 0.0, task.start
    for a, b in spans:
        if b > reach:
            covered += b - max(a, reach)
            reach = b
    return covered / (task.end - task.start)


class Timeline:
    def __init__(self, tasks):
        self.tasks = tasks
        self.makespan = max((t.end for t in tasks), default=0.0)

    def busy(self, resource, category=None):
        return sum(t.duration for t in self.tasks
                   if resource in t.resources and (category is None or t.category == category))
