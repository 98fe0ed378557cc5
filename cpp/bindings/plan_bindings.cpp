// What the scaling planner (python/mdtrain/plan) reads from the core: the per-layer times the
// pipeline's stages="balance_time" cut uses, the cut itself, and the pipeline schedules the
// executor runs, so the planner costs the same measurements, stages and op order as the code that
// trains.
#include <chrono>

#include "bindings.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/strategy/pipeline_schedule.h"
#include "mdtrain/strategy/pipeline_strategy.h"
#include "mdtrain/strategy/stage_balance.h"
#include "mdtrain/strategy/stage_timer.h"

namespace mdtrain::bindings {

void init_plan(py::module_& m) {
  m.def(
      "measure_layer_times",
      [](Model& model, std::int64_t rows, int repeats, int in_flight) {
        LayerStack& stack = model.stack();
        py::gil_scoped_release release;
        return measure_layer_times(stack, rows, repeats, in_flight);
      },
      py::arg("model"), py::arg("rows") = kBalanceTimeRows, py::arg("repeats") = 3, py::arg("in_flight") = 1,
      "Nanoseconds of forward + backward of each layer of a Sequential model on `rows` rows (the best "
      "of `repeats`; what PipelineParallel(stages='balance_time') cuts by); in_flight > 1: per "
      "micro-batch, with that many micro-batches' activations held at once (a GPipe stage).");
  m.attr("BALANCE_TIME_ROWS") = kBalanceTimeRows;
  m.def(
      "measure_stage_time",
      [](Model& model, std::size_t first, std::size_t last, std::int64_t rows, const std::string& schedule, int stages,
         int microbatches, int stage, int repeats) {
        const PipelineSchedule s = make_pipeline_schedule(pipeline_schedule_kind(schedule), stages, microbatches);
        MDTRAIN_CHECK(stage >= 0 && stage < stages, std::invalid_argument, "[pipeline] measure_stage_time: stage ",
                      stage, " of a ", stages, "-stage schedule");
        LayerStack& stack = model.stack();
        py::gil_scoped_release release;
        std::vector<std::pair<std::int64_t, std::int64_t>> out;
        for (const StageTime& t :
             measure_stage_time(stack, first, last, rows, s.ops[static_cast<std::size_t>(stage)], repeats))
          out.emplace_back(t.forward_ns, t.backward_ns);
        return out;
      },
      py::arg("model"), py::arg("first"), py::arg("last"), py::arg("rows"), py::arg("schedule"), py::arg("stages"),
      py::arg("microbatches"), py::arg("stage"), py::arg("repeats") = 1,
      "Nanoseconds (forward, backward) of layers [first, last) of a Sequential model run as stage `stage` of "
      "`schedule` with `stages` stages and `microbatches` micro-batches of `rows` rows, as PipelineExecutor "
      "runs it (state slots sharing the stage's weights, gradients summed), summed over the stage's op "
      "list: one per timed pass, after an untimed one.");
  m.def(
      "time_collective_calls",
      [](Communicator& comm, const py::array& array, const std::string& op, int calls) {
        MDTRAIN_CHECK(op == "all_reduce" || op == "reduce" || op == "broadcast", std::invalid_argument,
                      "[plan] time_collective_calls: op must be 'all_reduce', 'reduce' or 'broadcast', got '", op, "'");
        MDTRAIN_CHECK(calls >= 1, std::invalid_argument, "[plan] time_collective_calls: calls must be >= 1, got ",
                      calls);
        MDTRAIN_CHECK(array.writeable(), std::invalid_argument, "[plan] time_collective_calls: the array is read-only");
        Tensor t = tensor_from_numpy(array);
        // Back to back on this thread without Python between the calls: as a step issues its
        // collectives. A loop in Python put each call's return through the GIL, which the other
        // ranks' threads of a threads communicator were waiting for (the seed MLP's 407 KB
        // reduce + broadcast of 2 threads read 49 us, this loop 21, its CentralStorage step 19-21).
        py::gil_scoped_release release;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          if (op == "all_reduce") {
            comm.all_reduce(t, ReduceOp::Sum);
          } else if (op == "reduce") {
            comm.reduce(t.raw(), static_cast<std::size_t>(t.numel()), t.dtype(), ReduceOp::Sum, 0);
          } else {
            comm.broadcast(t, 0);
          }
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
      py::arg("comm"), py::arg("array"), py::arg("op"), py::arg("calls"),
      "Seconds of `calls` back-to-back collectives `op` ('all_reduce' (sum), 'reduce' onto rank 0 or "
      "'broadcast' from rank 0) of `array` in place, on this rank (every rank calls it at once).");
  m.def("balance_stages", &balance_stages, py::arg("layer_costs"), py::arg("stages"),
        "The first layer of stages 1..stages-1 of the contiguous cut whose costliest stage costs least "
        "(then the most even): how PipelineParallel cuts a model by parameter counts or measured times.");
  m.def(
      "pipeline_schedule_ops",
      [](const std::string& schedule, int stages, int microbatches) {
        const PipelineSchedule s = make_pipeline_schedule(pipeline_schedule_kind(schedule), stages, microbatches);
        std::vector<std::vector<std::pair<std::string, int>>> out(s.ops.size());
        for (std::size_t i = 0; i < s.ops.size(); ++i)
          for (const auto& op : s.ops[i]) out[i].emplace_back(name_of(op.kind), op.microbatch);
        return out;
      },
      py::arg("schedule"), py::arg("stages"), py::arg("microbatches"),
      "Each stage's ops (kind, micro-batch) in the order PipelineExecutor runs them.");
}

}  // namespace mdtrain::bindings
