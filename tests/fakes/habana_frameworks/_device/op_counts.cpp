// TEST DOUBLE: what the emulated device counts for the bridge's metrics (not Intel's software).
//
// hpu_device.cpp calls in here from its boxed fallback and its copies; the Python side
// (habana_frameworks/torch/hpu/metrics) turns the raw counts into the bridge's metrics:
// - every op that reaches the fallback, by its operator name ("aten::add.Tensor", the name
//   the bridge's fallback emits with CPU_FALLBACK: hpu_ops/cpu_fallback.cpp:90-96 @ 5a56187);
//   Python decides from the bridge's op table which of them have no HPU kernel on a Gaudi;
// - device-to-host copies made by the user's code (not the emulation's own host copies);
// - lazy mode: the ops accumulated since the last flush hash into a graph signature (op
//   names, each tensor argument's sizes and dtype); a flush (mark_step, a device-to-host copy
//   or an op that needs its inputs' values on the host) runs the graph, and a signature not
//   seen before is one more compiled graph (a recipe is compiled once per graph and cached:
//   Intel Gaudi docs, "Lazy mode": graphs are compiled at mark_step and cached by their
//   structure and shapes).

#include "op_counts.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/extension.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace fake_hpu {
namespace counts {

namespace {
struct State {
  std::mutex lock;
  std::unordered_map<std::string, int64_t> ops;  // ops that reached the fallback, by name
  int64_t d2h = 0;                               // device-to-host copies by the user's code
  bool lazy = false;
  std::unordered_set<std::string> sync_ops;  // ops whose result the host must wait for
  uint64_t pending = 0;                      // signature of the graph accumulated so far
  int64_t pending_ops = 0;
  std::unordered_set<uint64_t> seen;  // signatures already compiled
  int64_t graphs = 0;                 // lazy graphs compiled (new signatures)
};

State& state() {
  static State s;
  return s;
}

thread_local int internal_depth = 0;  // > 0 inside the emulation's own host copies

void mix(uint64_t& h, uint64_t v) {  // FNV-style combine: order matters, as in a graph
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
}

void flush_locked(State& s) {
  if (s.pending_ops > 0 && s.seen.insert(s.pending).second) s.graphs += 1;
  s.pending = 0;
  s.pending_ops = 0;
}
}  // namespace

Internal::Internal() { ++internal_depth; }
Internal::~Internal() { --internal_depth; }

void op_reached(const c10::OperatorHandle& op, const torch::jit::Stack* stack) {
  if (internal_depth > 0) return;
  const std::string name = c10::toString(op.operator_name());
  auto& s = state();
  std::lock_guard<std::mutex> g(s.lock);
  s.ops[name] += 1;
  if (!s.lazy) return;
  const bool sync = s.sync_ops.count(name) > 0;
  if (sync) flush_locked(s);  // the host needs this op's inputs: the graph so far runs
  mix(s.pending, std::hash<std::string>{}(name));
  const auto n = op.schema().arguments().size();
  for (size_t i = 0; stack && i < n && i < stack->size(); ++i) {
    const auto& v = (*stack)[stack->size() - n + i];
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    if (!t.defined()) continue;
    mix(s.pending, static_cast<uint64_t>(t.scalar_type()));
    for (auto d : t.sizes()) mix(s.pending, static_cast<uint64_t>(d));
  }
  s.pending_ops += 1;
  if (sync) flush_locked(s);  // its result goes to the host at once
}

void device_to_host() {
  if (internal_depth > 0) return;
  auto& s = state();
  std::lock_guard<std::mutex> g(s.lock);
  s.d2h += 1;
  if (s.lazy) flush_locked(s);  // the copied tensor must be computed first
}

void bind(pybind11::module& m) {
  m.def("counts_configure", [](bool lazy, std::vector<std::string> sync_ops) {
    auto& s = state();
    std::lock_guard<std::mutex> g(s.lock);
    s.lazy = lazy;
    s.sync_ops = std::unordered_set<std::string>(sync_ops.begin(), sync_ops.end());
  });
  // a fused kernel the double runs as several host ops (FusedAdamW, FusedClipNorm): one
  // device op on a Gaudi, with no fallback and no host copy of its own
  m.def("counts_enter_kernel", []() { ++internal_depth; });
  m.def("counts_exit_kernel", []() { --internal_depth; });
  m.def("counts_flush", []() {  // mark_step: the accumulated graph runs
    auto& s = state();
    std::lock_guard<std::mutex> g(s.lock);
    flush_locked(s);
  });
  m.def("counts", []() {
    auto& s = state();
    std::lock_guard<std::mutex> g(s.lock);
    pybind11::dict ops;
    for (const auto& kv : s.ops) ops[pybind11::str(kv.first)] = kv.second;
    pybind11::dict d;
    d["ops"] = ops;
    d["device_to_host"] = s.d2h;
    d["lazy_graphs"] = s.graphs;
    return d;
  });
}

}  // namespace counts
}  // namespace fake_hpu
