// TEST DOUBLE: the emulated device's counts for the bridge's metrics (see op_counts.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/extension.h>

namespace fake_hpu {
namespace counts {

// While one lives on this thread, the device's copies and ops are the emulation's own (the
// CPU fallback's host copies, the convolution's): not counted.
struct Internal {
  Internal();
  ~Internal();
};

// PT_HPU_PLACE_ON_CPU: throws the bridge's error for an op with no HPU kernel that the
// setting does not let fall back to the CPU (see op_counts.cpp)
void check_fallback_allowed(const c10::OperatorHandle& op);
void op_reached(const c10::OperatorHandle& op, const torch::jit::Stack* stack);
void device_to_host();
void bind(pybind11::module& m);

}  // namespace counts
}  // namespace fake_hpu
