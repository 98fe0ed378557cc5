"""tf.compat.v1.ConfigProto / GPUOptions: accepted where TF 2 code passes them (tf.distribute.Server's
config), keeping what is set; a field TF's protocol buffers do not have is refused as TF refuses it."""
import pytest

import mdtrain as tf


def test_config_proto_keeps_tf_fields_with_tf_defaults():
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    assert config.allow_soft_placement is True and config.inter_op_parallelism_threads == 0
    config.inter_op_parallelism_threads = 3
    config.gpu_options.allow_growth = True
    assert config.inter_op_parallelism_threads == 3 and config.gpu_options.allow_growth is True
    assert tf.compat.v1.ConfigProto().gpu_options.allow_growth is False  # each proto its own options
    assert "inter_op_parallelism_threads=3" in repr(config)


def test_an_unknown_field_is_refused_as_tf_refuses_it():
    with pytest.raises(AttributeError, match='no field "inter_op_threads" in protocol message object'):
        tf.compat.v1.ConfigProto().inter_op_threads = 2
    with pytest.raises(AttributeError, match='no field "growth"'):
        tf.compat.v1.GPUOptions(growth=True)


def test_server_checks_its_config_and_protocol_before_anything_starts():
    cluster = {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}
    with pytest.raises(TypeError, match="config must be a tf.compat.v1.ConfigProto or None, got dict"):
        tf.distribute.Server(cluster, job_name="worker", task_index=0, config={"threads": 2})
    with pytest.raises(ValueError, match="protocol must be 'grpc'"):
        tf.distribute.Server(cluster, job_name="worker", task_index=0, protocol="grpc+verbs")
