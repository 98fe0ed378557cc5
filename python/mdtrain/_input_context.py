"""tf.distribute.InputContext: which input pipeline a dataset function builds, out of how many."""


class InputContext:
    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        if num_input_pipelines < 1 or not 0 <= input_pipeline_id < num_input_pipelines:
            raise ValueError(f"InputContext: input_pipeline_id must be in [0, {num_input_pipelines}), "
                             f"got {input_pipeline_id}")
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError(f"The global batch size {global_batch_size} is not divisible by the "
                             f"{self.num_replicas_in_sync} replicas in sync")
        return global_batch_size // self.num_replicas_in_sync

    def __repr__(self):
        return (f"InputContext(num_input_pipelines={self.num_input_pipelines}, "
                f"input_pipeline_id={self.input_pipeline_id}, num_replicas_in_sync={self.num_replicas_in_sync})")
