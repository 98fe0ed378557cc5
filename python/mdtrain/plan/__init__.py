"""The scaling planner: predicts the step time and memory of each strategy for a model on a
cluster from measured costs (docs/planner.md). Exposed as tf.distribute.experimental.plan."""
from mdtrain.plan.alpha_beta import AlphaBeta, fit_alpha_beta, fit_benchmark_json
from mdtrain.plan.cluster import Cluster
from mdtrain.plan.plan_result import Plan, PlanList
from mdtrain.plan.planner import plan
from mdtrain.plan.profile import ModelProfile, profile_model

__all__ = ["AlphaBeta", "Cluster", "ModelProfile", "Plan", "PlanList", "fit_alpha_beta", "fit_benchmark_json", "plan",
           "profile_model"]
