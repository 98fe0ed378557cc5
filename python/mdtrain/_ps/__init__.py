"""ParameterServerStrategy: variables on parameter-server tasks, steps scheduled on worker tasks.

The hot path (serving pulls, applying pushes, the shard updates) is the C++ engine of
cpp/mdtrain/strategy/parameter_server/; this package is the Python control plane: the task
services (`Server`), the chief's `ClusterCoordinator`, the strategy and `fit` under it.
See docs/parameter_server.md.
"""
