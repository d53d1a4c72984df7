// TEST DOUBLE: what the emulated device counts for the bridge's metrics (not Intel's software).
//
// hpu_device.cpp calls in here from its boxed fallback and its copies; the Python side
// (habana_frameworks/torch/hpu/metrics) turns the raw counts into the bridge's metrics:
// - every op that reaches the fallback, by its operator name ("aten::add.Tensor", the name
//   the bridge's fallback emits with CPU_FALLBACK: hpu_ops/cpu_fallback.cpp:90-96 @ 5a56187);
//   Python decides from the bridge's op table which of them have no HPU kernel on a Gaudi;
// - device-to-host copies made by the user's code (not the emulation's own host copies), and
//   the host round trip of each op with no HPU kernel (a CPU fallback: it cuts a lazy graph);
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
#include <cstdlib>
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
  int64_t fallback_syncs = 0;  // host round trips of CPU fallbacks (ops with no HPU kernel)
  bool lazy = false;
  std::unordered_set<std::string> sync_ops;  // ops whose result the host must wait for
  uint64_t pending = 0;                      // signature of the graph accumulated so far
  int64_t pending_ops = 0;
  std::unordered_set<uint64_t> seen;  // signatures already compiled
  int64_t graphs = 0;                 // lazy graphs compiled (new signatures)
  std::unordered_set<std::string> no_kernel;  // ops with no HPU kernel on a Gaudi (op table)
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
  if (s.no_kernel.count(name) > 0) {
    // A real CPU fallback (no HPU kernel on a Gaudi): the bridge's boxed fallback hands the
    // op to at::native::cpu_fallback, which copies every HPU input to the host (`.cpu()`)
    // and the results back (hpu_ops/cpu_fallback.cpp:86-115 @ 5a56187): the host waits for
    // the inputs, one host sync per fallback. In lazy mode that copy materialises the graph
    // accumulated so far ("step marker due to cpu fallback", habana_kernels/fallback_helper.h
    // :50; the same @ ea38cef), and the op itself joins no graph: the next ops start a new one.
    s.fallback_syncs += 1;
    if (s.lazy) flush_locked(s);
    return;
  }
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

// PT_HPU_PLACE_ON_CPU, read once, when the bridge's HpuFallbackHelper singleton is built at
// its first use (habana_kernels/fallback_helper.cpp, enumerate_fallback, @ 5a56187 and the
// same @ ea38cef; the flag's doc: scripts/env_flags.yaml:760 @ 5a56187): unset or empty, every
// op may fall back to the CPU; a comma-separated list that contains `none`, none may; any
// other list, only the ops it names (by operator name, "aten::nonzero"). Its other use, placing
// a listed op that has an HPU kernel on the CPU (is_placed_on_cpu), is not emulated.
struct Placement {
  bool any = true;
  std::unordered_set<std::string> allowed;
};

Placement read_placement() {
  Placement p;
  const char* env = std::getenv("PT_HPU_PLACE_ON_CPU");
  if (env == nullptr || *env == '\0') return p;
  p.any = false;
  std::string list(env);
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? comma : comma - start);
    if (name == "none") {
      p.allowed.clear();
      break;
    }
    p.allowed.insert(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return p;
}

void check_fallback_allowed(const c10::OperatorHandle& op) {
  if (internal_depth > 0) return;  // the emulation's own ops (a fused kernel's host ops)
  static const Placement placement = read_placement();
  if (placement.any) return;
  const std::string name = c10::toString(op.operator_name());
  {
    // Only an op the bridge has no HPU kernel for reaches its fallback; the double's fallback
    // also runs every op that has one (its stand-in for the kernel), which is never refused.
    // An op newer than the table ("unlisted") is not refused either: the double cannot tell.
    auto& s = state();
    std::lock_guard<std::mutex> g(s.lock);
    if (s.no_kernel.count(name) == 0) return;
  }
  // HpuFallbackHelper::check_fallback_allowed (habana_kernels/fallback_helper.h:53), called
  // first thing in the bridge's boxed fallback (hpu_ops/cpu_fallback.cpp:93 @ 5a56187):
  // TORCH_CHECK on 1.19, HABANA_ASSERT @ ea38cef; both throw a c10::Error, a RuntimeError in
  // Python, with this message. The op is not counted as a fallback: the check comes first.
  TORCH_CHECK(placement.allowed.count(name) > 0, name, " is not yet supported on HPU.");
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
  // the ops with no HPU kernel on a Gaudi (the op table's "cpu" rows, habana_frameworks/_counts.py)
  m.def("counts_no_kernel", [](std::vector<std::string> ops) {
    auto& s = state();
    std::lock_guard<std::mutex> g(s.lock);
    s.no_kernel = std::unordered_set<std::string>(ops.begin(), ops.end());
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
    d["cpu_fallback"] = s.fallback_syncs;
    d["lazy_graphs"] = s.graphs;
    return d;
  });
}

}  // namespace counts
}  // namespace fake_hpu
