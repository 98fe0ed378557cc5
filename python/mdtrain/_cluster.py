"""Cluster descriptions as TF writes them: tf.train.ClusterSpec, and the cluster resolvers of
tf.distribute.cluster_resolver that read one from TF_CONFIG or take it as given.

A cluster is a dict from job name ("chief", "worker", "ps", "evaluator") to the "host:port"
addresses of its tasks. Where TF accepts a bad cluster and fails later (a typo'd role, two tasks
on one port, a host that does not resolve), these raise at once, naming the task.
"""
import json
import os
import socket

KNOWN_JOBS = ("chief", "worker", "ps", "evaluator")


def _check_address(job, index, address):
    if not isinstance(address, str):
        raise TypeError(f"cluster: {job} {index} must be a 'host:port' string, got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"cluster: {job} {index} has address {address!r}; expected 'host:port'")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"cluster: {job} {index} has port {port!r} in {address!r}; expected 1..65535")
    return host.strip("[]"), int(port)


class ClusterSpec:
    """tf.train.ClusterSpec: job name -> task addresses ("host:port"), as a list (task i at index
    i) or a dict {index: address}."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise TypeError(f"ClusterSpec: cluster must be a dict of job name -> addresses, got {cluster!r}")
        self._jobs = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job:
                raise ValueError(f"ClusterSpec: job names must be non-empty strings, got {job!r}")
            if isinstance(tasks, str):
                tasks = [tasks]
            if isinstance(tasks, dict):
                table = {}
                for index, address in tasks.items():
                    if not isinstance(index, int) or index < 0:
                        raise ValueError(f"ClusterSpec: {job}'s task indices must be ints >= 0, got {index!r}")
                    table[index] = address
            elif isinstance(tasks, (list, tuple)):
                table = dict(enumerate(tasks))
            else:
                raise TypeError(f"ClusterSpec: {job}'s tasks must be a list or dict of 'host:port', got {tasks!r}")
            for index, address in table.items():
                _check_address(job, index, address)
            self._jobs[job] = dict(sorted(table.items()))

    @property
    def jobs(self):
        return list(self._jobs)

    def num_tasks(self, job_name):
        return len(self._job(job_name))

    def task_indices(self, job_name):
        return list(self._job(job_name))

    def task_address(self, job_name, task_index):
        tasks = self._job(job_name)
        if task_index not in tasks:
            raise ValueError(f"ClusterSpec: no task {task_index} in job {job_name!r} (it has {list(tasks)})")
        return tasks[task_index]

    def job_tasks(self, job_name):
        tasks = self._job(job_name)
        return [tasks.get(i) for i in range(max(tasks) + 1)] if tasks else []

    def as_dict(self):
        return {job: (list(tasks.values()) if list(tasks) == list(range(len(tasks))) else dict(tasks))
                for job, tasks in self._jobs.items()}

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()!r})"

    def _job(self, job_name):
        if job_name not in self._jobs:
            raise ValueError(f"ClusterSpec: no job named {job_name!r} (jobs: {self.jobs})")
        return self._jobs[job_name]


def validate_cluster(cluster_spec, *, required=(), resolve_hosts=True):
    """The checks a parameter-server job needs before it starts: known job names, the `required`
    jobs present, no two tasks on one host:port, every host resolvable. Raises ValueError naming
    the task."""
    seen = {}
    for job in cluster_spec.jobs:
        if job not in KNOWN_JOBS:
            raise ValueError(f"cluster: unknown job {job!r}; the jobs are {', '.join(KNOWN_JOBS)}")
    for job in required:
        if job not in cluster_spec.jobs or cluster_spec.num_tasks(job) == 0:
            raise ValueError(f"cluster: a parameter-server job needs at least one {job!r} task; "
                             f"the cluster has {cluster_spec.jobs}")
    if "chief" in cluster_spec.jobs and cluster_spec.num_tasks("chief") != 1:
        raise ValueError(f"cluster: there must be exactly one chief, got {cluster_spec.num_tasks('chief')}")
    resolved = {}
    for job in cluster_spec.jobs:
        for index in cluster_spec.task_indices(job):
            address = cluster_spec.task_address(job, index)
            host, port = _check_address(job, index, address)
            if resolve_hosts and host not in resolved:
                try:
                    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                except socket.gaierror as e:
                    raise ValueError(f"cluster: {job} {index} is at {address!r}, but host {host!r} does not "
                                     f"resolve ({e.strerror})") from None
                resolved[host] = {info[4][0] for info in infos}
            key = (frozenset(resolved.get(host, {host})), port)
            for other_key, other in seen.items():
                if other_key[1] == port and other_key[0] & key[0]:
                    raise ValueError(f"cluster: {job} {index} and {other[0]} {other[1]} are both at port {port} "
                                     f"of the same host ({address!r}, {other[2]!r})")
            seen[key] = (job, index, address)


class ClusterResolver:
    """The base of tf.distribute.cluster_resolver's resolvers."""

    task_type = None
    task_id = None
    rpc_layer = None
    environment = ""

    def cluster_spec(self):
        raise NotImplementedError

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        if task_type is None or task_id is None:
            return ""
        address = self.cluster_spec().task_address(task_type, task_id)
        layer = self.rpc_layer if rpc_layer is None else rpc_layer
        return f"{layer}://{address}" if layer else address

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        from mdtrain import config as _config
        return {"GPU": len(_config.list_physical_devices("GPU"))}


class SimpleClusterResolver(ClusterResolver):
    """tf.distribute.cluster_resolver.SimpleClusterResolver: a cluster given as it is."""

    def __init__(self, cluster_spec, master="", task_type=None, task_id=None, environment="",
                 num_accelerators=None, rpc_layer=None):
        self._cluster_spec = cluster_spec if isinstance(cluster_spec, ClusterSpec) else ClusterSpec(cluster_spec)
        self._master = master
        self.task_type, self.task_id = task_type, task_id
        self.environment = environment
        self.rpc_layer = rpc_layer
        self._num_accelerators = num_accelerators

    def cluster_spec(self):
        return self._cluster_spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        if task_type is None and task_id is None and self._master:
            return self._master
        return super().master(task_type, task_id, rpc_layer)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        if self._num_accelerators is not None:
            return dict(self._num_accelerators)
        return super().num_accelerators(task_type, task_id, config_proto)


class TFConfigClusterResolver(ClusterResolver):
    """tf.distribute.cluster_resolver.TFConfigClusterResolver: the cluster, this task's role and
    index, and the RPC layer from the TF_CONFIG environment variable (JSON), read when asked, as
    in TF:

        {"cluster": {"chief": ["host:2222"], "worker": ["host:2223", ...], "ps": [...]},
         "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"}
    """

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        self._task_type, self._task_id = task_type, task_id
        self._rpc_layer, self._environment = rpc_layer, environment

    @staticmethod
    def _config():
        text = os.environ.get("TF_CONFIG", "")
        if not text.strip():
            return {}
        try:
            config = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"TF_CONFIG is not valid JSON ({e.msg} at character {e.pos}): {text[:200]!r}") from None
        if not isinstance(config, dict):
            raise ValueError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {text[:200]!r}")
        task = config.get("task", {})
        if not isinstance(task, dict):
            raise ValueError(f"TF_CONFIG: 'task' must be an object like {{\"type\": \"worker\", \"index\": 0}}, "
                             f"got {task!r}")
        return config

    @property
    def task_type(self):
        if self._task_type is not None:
            return self._task_type
        task_type = self._config().get("task", {}).get("type")
        if task_type is not None and task_type not in KNOWN_JOBS:
            raise ValueError(f"TF_CONFIG: unknown task type {task_type!r}; the jobs are {', '.join(KNOWN_JOBS)}")
        return task_type

    @task_type.setter
    def task_type(self, value):
        self._task_type = value

    @property
    def task_id(self):
        if self._task_id is not None:
            return self._task_id
        index = self._config().get("task", {}).get("index")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
            raise ValueError(f"TF_CONFIG: task index must be an int >= 0, got {index!r}")
        return index

    @task_id.setter
    def task_id(self, value):
        self._task_id = value

    @property
    def rpc_layer(self):
        return self._rpc_layer if self._rpc_layer is not None else self._config().get("rpc_layer")

    @rpc_layer.setter
    def rpc_layer(self, value):
        self._rpc_layer = value

    @property
    def environment(self):
        return self._environment if self._environment is not None else self._config().get("environment", "")

    def cluster_spec(self):
        return ClusterSpec(self._config().get("cluster", {}))
