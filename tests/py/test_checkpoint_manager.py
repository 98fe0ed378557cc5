"""Issue 34, class 9: a tf.train.CheckpointManager deletes only the checkpoints it manages (as
TF's keeps its own list), so two managers in one directory keep each other's files; the
directory's "checkpoint" state file is replaced atomically; keep_checkpoint_every_n_hours,
checkpoint_interval and init_fn work as in TF."""
import os
import types

import pytest

import mdtrain as tf
from conftest import built_mlp


@pytest.fixture
def model():
    return built_mlp()


def files(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".weights.h5"))


def test_two_managers_of_other_names_keep_each_others_checkpoints(tmp_path, model):
    a = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2, checkpoint_name="a")
    b = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2, checkpoint_name="b")
    for _ in range(5):  # interleaved: each save rewrites the state file with its own list
        a.save()
        b.save()
    assert files(tmp_path) == ["a-4.weights.h5", "a-5.weights.h5", "b-4.weights.h5", "b-5.weights.h5"]
    assert [os.path.basename(p) for p in a.checkpoints] == ["a-4.weights.h5", "a-5.weights.h5"]
    assert [os.path.basename(p) for p in b.checkpoints] == ["b-4.weights.h5", "b-5.weights.h5"]
    # The state file lists the last saver's checkpoints, as TF's.
    assert tf.train.latest_checkpoint(tmp_path) == b.latest_checkpoint == b.checkpoints[-1]


def test_a_manager_created_later_leaves_the_other_names_files(tmp_path, model):
    a = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2, checkpoint_name="a")
    for _ in range(5):
        a.save()
    b = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2, checkpoint_name="b")
    assert b.checkpoints == [] and b.latest_checkpoint is None
    for _ in range(5):
        b.save()
    assert files(tmp_path) == ["a-4.weights.h5", "a-5.weights.h5", "b-4.weights.h5", "b-5.weights.h5"]


def test_two_managers_of_one_name_delete_only_their_own_saves(tmp_path, model):
    """Both created before either saved: each keeps its own list, as TF (their files may then
    overwrite each other's by number; the list of each is its own)."""
    first = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2)
    second = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2)
    for n in range(1, 6):
        first.save(checkpoint_number=n)
        second.save(checkpoint_number=100 + n)
    assert files(tmp_path) == ["ckpt-104.weights.h5", "ckpt-105.weights.h5", "ckpt-4.weights.h5",
                               "ckpt-5.weights.h5"]


def test_a_restarted_manager_goes_on_cleaning_up_its_predecessors(tmp_path, model):
    first = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2)
    paths = [first.save() for _ in range(3)]
    again = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2)
    assert again.checkpoints == paths[-2:] and again.latest_checkpoint == paths[-1]
    again.save(checkpoint_number=4)
    assert files(tmp_path) == ["ckpt-3.weights.h5", "ckpt-4.weights.h5"]


def test_state_file_records_timestamps_and_is_replaced_atomically(tmp_path, model, monkeypatch):
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=3)
    manager.save()
    text = (tmp_path / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-1.weights.h5"' in text
    assert "all_model_checkpoint_timestamps:" in text and "last_preserved_timestamp:" in text
    # A failure while the state file is written leaves the previous one whole and no temporary.
    import builtins

    real_open = builtins.open

    def failing_open(path, mode="r", *args, **kwargs):
        if "w" in mode and os.path.basename(str(path)).startswith("checkpoint.tmp."):
            raise OSError("simulated disk full")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", failing_open)
    with pytest.raises(OSError, match="simulated"):
        manager.save()
    monkeypatch.undo()
    assert (tmp_path / "checkpoint").read_text() == text
    assert not [n for n in os.listdir(tmp_path) if ".tmp." in n]


def test_keep_checkpoint_every_n_hours_preserves_one_per_period(tmp_path, model, monkeypatch):
    from mdtrain import train

    clock = [1_000_000.0]
    monkeypatch.setattr(train, "time", types.SimpleNamespace(time=lambda: clock[0]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=1,
                                         keep_checkpoint_every_n_hours=1)
    for _ in range(6):
        manager.save()
        clock[0] += 1800.0  # half an hour between saves
    # Saved at 0, 0.5, ..., 2.5 h. TF's rule: the oldest one beyond max_to_keep is kept when it is
    # at least an hour newer than the last kept (at first: the manager's creation, less a second).
    assert files(tmp_path) == ["ckpt-3.weights.h5", "ckpt-5.weights.h5", "ckpt-6.weights.h5"]
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-6.weights.h5"]


def test_checkpoint_interval_saves_when_the_step_advanced(tmp_path, model):
    step = tf.Variable(0, dtype="int64")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=None,
                                         step_counter=step, checkpoint_interval=10)
    saved = []
    for s in range(0, 25, 5):
        step.assign(s)
        saved.append(manager.save() is not None)
    assert saved == [True, False, True, False, True]
    step.assign(21)
    assert manager.save(check_interval=False) is not None
    assert manager.save(check_interval=False) is None  # never twice at one step, as TF
    with pytest.raises(ValueError, match="step_counter"):
        tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=1, checkpoint_interval=5)


def test_restore_or_initialize_calls_init_fn_without_a_checkpoint(tmp_path, model):
    calls = []
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=1,
                                         init_fn=lambda: calls.append(1))
    assert manager.restore_or_initialize() is None and calls == [1]
    path = manager.save()
    again = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=1,
                                       init_fn=lambda: calls.append(2))
    assert again.restore_or_initialize() == path and calls == [1]


def test_manager_refuses_bad_arguments(tmp_path, model):
    ckpt = tf.train.Checkpoint(model=model)
    with pytest.raises(ValueError, match="keep_checkpoint_every_n_hours"):
        tf.train.CheckpointManager(ckpt, tmp_path, max_to_keep=1, keep_checkpoint_every_n_hours=-1)
    with pytest.raises(ValueError, match="checkpoint_interval"):
        tf.train.CheckpointManager(ckpt, tmp_path, 1, step_counter=tf.Variable(0, dtype="int64"),
                                   checkpoint_interval=0)
    with pytest.raises(TypeError, match="init_fn"):
        tf.train.CheckpointManager(ckpt, tmp_path, max_to_keep=1, init_fn=3)
    with pytest.raises(NotImplementedError, match="options"):
        tf.train.CheckpointManager(ckpt, tmp_path, max_to_keep=1).save(options=object())


def test_latest_checkpoint_reads_the_named_state_file(tmp_path, model):
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=1)
    path = manager.save()
    os.replace(tmp_path / "checkpoint", tmp_path / "other_state")
    assert tf.train.latest_checkpoint(tmp_path, latest_filename="other_state") == path
    assert tf.train.latest_checkpoint(tmp_path, latest_filename="absent") is None
    with pytest.raises(ValueError, match="latest_filename"):
        tf.train.latest_checkpoint(tmp_path, latest_filename="../x")
