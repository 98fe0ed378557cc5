"""Cluster descriptions as TF users write them: TF_CONFIG, ClusterSpec, the resolvers, and the
checks a parameter-server job makes before it starts."""
import json

import pytest

import mdtrain as tf
from mdtrain._cluster import ClusterSpec, validate_cluster

CLUSTER = {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"],
           "ps": ["127.0.0.1:2225", "127.0.0.1:2226"]}


def set_tf_config(monkeypatch, task_type="worker", index=1, **extra):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": CLUSTER, "task": {"type": task_type, "index": index},
                                                **extra}))


def test_tf_config_resolver_reads_the_cluster_and_this_task(monkeypatch):
    set_tf_config(monkeypatch, rpc_layer="grpc")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == ("worker", 1, "grpc")
    assert spec.jobs == ["chief", "worker", "ps"]
    assert spec.num_tasks("ps") == 2 and spec.task_address("ps", 1) == "127.0.0.1:2226"
    assert spec.as_dict() == CLUSTER
    assert resolver.master() == "grpc://127.0.0.1:2224"
    assert resolver.master("ps", 0, rpc_layer="") == "127.0.0.1:2225"
    # Read when asked, as in TF: a changed TF_CONFIG is seen; explicit arguments win.
    set_tf_config(monkeypatch, task_type="ps", index=0)
    assert (resolver.task_type, resolver.task_id) == ("ps", 0)
    assert tf.distribute.cluster_resolver.TFConfigClusterResolver(task_type="chief", task_id=0).task_type == "chief"


def test_no_tf_config_is_an_empty_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert not resolver.cluster_spec() and resolver.task_type is None and resolver.master() == ""


def test_bad_tf_config_names_the_problem(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    set_tf_config(monkeypatch, task_type="master")
    with pytest.raises(ValueError, match="unknown task type 'master'"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver().task_type
    set_tf_config(monkeypatch, index=-1)
    with pytest.raises(ValueError, match="task index must be an int >= 0"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver().task_id
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"ps": ["127.0.0.1"]}}))
    with pytest.raises(ValueError, match="ps 0 has address '127.0.0.1'; expected 'host:port'"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"ps": ["127.0.0.1:99999"]}}))
    with pytest.raises(ValueError, match="port '99999'"):
        tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()


def test_simple_cluster_resolver_and_sparse_task_indices():
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        ClusterSpec({"worker": {0: "127.0.0.1:3000", 2: "127.0.0.1:3002"}}), task_type="worker", task_id=2,
        rpc_layer="grpc", num_accelerators={"GPU": 0})
    assert resolver.master() == "grpc://127.0.0.1:3002"
    assert resolver.cluster_spec().job_tasks("worker") == ["127.0.0.1:3000", None, "127.0.0.1:3002"]
    assert resolver.num_accelerators() == {"GPU": 0}
    with pytest.raises(ValueError, match="no task 1 in job 'worker'"):
        resolver.master("worker", 1)


def test_parameter_server_cluster_checks():
    validate_cluster(ClusterSpec(CLUSTER), required=("worker", "ps"))
    with pytest.raises(ValueError, match="unknown job 'parameter_server'"):
        validate_cluster(ClusterSpec({"parameter_server": ["127.0.0.1:1"]}))
    with pytest.raises(ValueError, match="needs at least one 'ps' task"):
        validate_cluster(ClusterSpec({"worker": ["127.0.0.1:1"]}), required=("worker", "ps"))
    with pytest.raises(ValueError, match="exactly one chief"):
        validate_cluster(ClusterSpec({"chief": ["127.0.0.1:1", "127.0.0.1:2"]}))
    # Two tasks on one port of one host, also when the host is spelt two ways.
    with pytest.raises(ValueError, match="ps 0 and worker 1 are both at port 2224"):
        validate_cluster(ClusterSpec({"worker": ["127.0.0.1:2223", "127.0.0.1:2224"], "ps": ["localhost:2224"]}))
    with pytest.raises(ValueError, match=r"ps 0 is at 'no-such-host.invalid:2225', but host 'no-such-host.invalid' "
                                         r"does not resolve"):
        validate_cluster(ClusterSpec({"worker": ["127.0.0.1:2223"], "ps": ["no-such-host.invalid:2225"]}))
