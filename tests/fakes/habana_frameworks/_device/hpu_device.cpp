// TEST DOUBLE: an emulated `hpu` device for CPU builds of torch (not Intel's software).
//
// Registers, for the built-in device type c10::DeviceType::HPU and its dispatch keys, what a
// backend must provide (the mechanism PyTorch's out-of-tree examples use for PrivateUse1,
// pytorch/pytorch test/cpp_extensions/open_registration_extension; written here for HPU):
// a device guard, an allocator with statistics, empty / empty_strided, the view ops that
// must alias, copies between CPU and HPU, a boxed CPU fallback for every other op, HPU hooks
// (pinned memory), and autocast for AutocastHPU. An HPU tensor's storage is host memory.
// Rules that follow the bridge cite HabanaAI/gaudi-pytorch-bridge @ 5a56187 (1.19.0).

#include <ATen/EmptyTensor.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/HPUHooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/extension.h>

#include "op_counts.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unordered_set>
#include <mutex>

namespace fake_hpu {

constexpr c10::DeviceType kHPU = c10::DeviceType::HPU;

// The library is loaded when torch is imported (the double's autoload entry point), since
// torch caches its HPU hooks on first use; the device exists only once the bridge's Python
// API (habana_frameworks.torch) has been imported and says so through set_bridge_loaded.
// Before that, as on a machine where the bridge has not loaded, torch sees no HPU.
std::atomic<bool> bridge_loaded{false};

void check_loaded() {
  TORCH_CHECK(bridge_loaded.load(),
              "hpu (emulated): the device is not loaded; import habana_frameworks.torch first");
}

// ----------------------------------------------------------------------- device guard
// One device per process, index 0: HABANAGuardImpl fails for any other index and reports
// one device (backend/habana_device/HPUGuardImpl.h @ 5a56187); the card itself is chosen
// by HLS_MODULE_ID / HABANA_VISIBLE_MODULES (the Python side, _card.py).
void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index == 0 || index == -1, "habana active device: ", static_cast<int>(index),
              " != 0");
}

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kHPU; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check_index(d.index());
    return c10::Device(kHPU, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kHPU, 0); }
  void setDevice(c10::Device d) const override { check_index(d.index()); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kHPU, 0));
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kHPU, 0));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  // Host memory: every op has finished when it returns, so events and streams are trivial.
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(HPU, GuardImpl);

// ----------------------------------------------------------------------- allocator
// Statistics as torch.hpu.memory_stats() names them (hpu/memory.py @ 5a56187): Limit, InUse,
// MaxInUse, NumAllocs, NumFrees, ActiveAllocs, MaxAllocSize, TotalSystemAllocs,
// TotalSystemFrees, TotalActiveAllocs. The counters are the pool allocator's MemoryStats
// (backend/synapse_helpers/device_mem_stats.h @ 5a56187, UpdateStats): every allocation
// counts in num_allocs and total_allocs, every free in num_frees and total_frees; the two
// "Active" keys are differences, not counters (hpu/csrc/bindings.cpp:211-227). Limit is
// FAKE_HPU_MEMORY (default 96 GiB); an allocation past it fails with the bridge's
// out-of-memory text ("PT_DEVMEM Allocation failed", what accelerate's memory utilities
// look for).
struct Stats {
  std::mutex lock;
  int64_t in_use = 0, max_in_use = 0, num_allocs = 0, num_frees = 0, max_alloc = 0,
          total_allocs = 0, total_frees = 0;
};
Stats& stats() {
  static Stats s;
  return s;
}

int64_t limit() {
  const char* env = std::getenv("FAKE_HPU_MEMORY");
  return env ? std::atoll(env) : int64_t(96) * 1024 * 1024 * 1024;
}

struct Block {
  int64_t size;
};

void free_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  {
    std::lock_guard<std::mutex> g(stats().lock);
    stats().in_use -= block->size;
    stats().num_frees += 1;
    stats().total_frees += 1;
  }
  c10::free_cpu(block);
}

struct Allocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    auto& s = stats();
    {
      std::lock_guard<std::mutex> g(s.lock);
      TORCH_CHECK_WITH(OutOfMemoryError, s.in_use + int64_t(nbytes) <= limit(),
                       "PT_DEVMEM Allocation failed for ", nbytes, " bytes: ", s.in_use,
                       " in use of the Limit ", limit(), " (FAKE_HPU_MEMORY)");
      s.in_use += nbytes;
      s.max_in_use = std::max(s.max_in_use, s.in_use);
      s.num_allocs += 1;
      s.total_allocs += 1;
      s.max_alloc = std::max(s.max_alloc, int64_t(nbytes));
    }
    // a 64-byte header (data stays aligned) holds the block's size for the stats
    char* raw = static_cast<char*>(c10::alloc_cpu(nbytes + 64));
    reinterpret_cast<Block*>(raw)->size = int64_t(nbytes);
    return {raw + 64, raw, &free_block, c10::Device(kHPU, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    default_copy_data(dest, src, count);
  }
};
Allocator allocator;
REGISTER_ALLOCATOR(kHPU, &allocator);

// ----------------------------------------------------------------------- hooks
// Pinned host memory for DataLoader(pin_memory=True): the bridge pins host buffers for
// transfers; here host memory is all there is, so pinned memory is the CPU allocator's.
struct Hooks final : at::HPUHooksInterface {
  explicit Hooks(at::HPUHooksArgs) {}
  void init() const override {}
  bool hasHPU() const override { return bridge_loaded.load(); }
  bool isBuilt() const override { return bridge_loaded.load(); }
  bool isAvailable() const override { return bridge_loaded.load(); }
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(kHPU, 0); }
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return bridge_loaded.load() ? 1 : 0; }
  void setCurrentDevice(c10::DeviceIndex d) const override { check_index(d); }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    check_index(d);
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  // ops run their CPU kernels, which draw from the CPU generator
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
};

// ----------------------------------------------------------------------- ops
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_loaded();
  if (device) check_index(device->index());
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "hpu (emulated): only strided tensors");
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::HPU);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin) {
  check_loaded();
  if (device) check_index(device->index());
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::HPU);
  return at::detail::empty_strided_generic(size, stride, &allocator, keys,
                                           c10::dtype_or_default(dtype));
}

// A CPU tensor over the same host memory (no copy): what an HPU tensor is, seen as a CPU one.
at::Tensor host_alias(const at::Tensor& t) {
  if (!t.is_hpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                       t.options().device(c10::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.is_hpu() || self.is_cpu(), "hpu (emulated): copy from ", self.device());
  TORCH_CHECK(dst.is_hpu() || dst.is_cpu(), "hpu (emulated): copy to ", dst.device());
  if (self.is_hpu() && dst.is_cpu()) counts::device_to_host();  // see op_counts.cpp
  host_alias(dst).copy_(host_alias(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                        c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::cpu::set__symint(self, source, offset, size, stride);
}

at::Tensor& set_source(at::Tensor& self, c10::Storage source) {
  return at::cpu::set_(self, source);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(offset));
}

// Convolutions reach backends other than CPU/CUDA through convolution_overrideable, whose
// default kernel raises: the double runs torch's CPU convolution on host copies. With every
// input bf16 the copies are widened to fp32 and the results rounded to bf16 once, as the matrix
// products below are (a bf16 convolution and its backward: 17 times slower on such a CPU).
at::Tensor on_host(const at::Tensor& t, bool widen = false) {
  if (!t.defined()) return t;
  auto host = t.to(c10::kCPU);
  return widen ? host.to(at::kFloat) : host;
}
at::Tensor on_hpu(const at::Tensor& t, bool narrow = false) {
  if (!t.defined()) return t;
  return (narrow ? t.to(at::kBFloat16) : t).to(c10::Device(kHPU, 0));
}
bool all_bf16(std::initializer_list<const at::Tensor*> tensors) {
  for (const auto* t : tensors) {
    if (t->defined() && t->scalar_type() != at::kBFloat16) return false;
  }
  return true;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  counts::Internal own;  // these host copies are the emulation's (Gaudi convolves on device)
  const at::Tensor none;
  const bool wide = all_bf16({&input, &weight, bias ? &*bias : &none});
  std::optional<at::Tensor> host_bias;
  if (bias && bias->defined()) host_bias = on_host(*bias, wide);
  return on_hpu(at::convolution(on_host(input, wide), on_host(weight, wide), host_bias, stride,
                                padding, dilation, transposed, output_padding, groups),
                wide);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  counts::Internal own;
  const bool wide = all_bf16({&grad_output, &input, &weight});
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto grads = at::convolution_backward(on_host(grad_output, wide), on_host(input, wide),
                                        on_host(weight, wide), bias_sizes, stride, padding,
                                        dilation, transposed, output_padding, groups,
                                        output_mask);
  return {on_hpu(std::get<0>(grads), wide), on_hpu(std::get<1>(grads), wide),
          on_hpu(std::get<2>(grads), wide)};
}

// The matrix products of a bf16 step (mm, bmm, addmm, baddbmm, which linear layers, attention
// and their backward reach below autocast, as their out= overloads), every input bf16, run on
// host copies widened to fp32 and are rounded to bf16 once. Torch's CPU bf16 kernels
// accumulate in fp32 too (at::opmath_type<BFloat16> is float), so the result is theirs up to
// summation order; on a CPU without bf16 units the fp32 product is about 11 times faster
// (2048x128 by 128x512: 4.3 ms against 47 ms on this project's machines). Emulation speed
// only: the op is checked and counted as every other, its output bf16 on hpu as before.
// False: not such an op, and the CPU fallback runs it.
bool bf16_product_in_fp32(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const std::unordered_set<std::string> products = {"aten::mm", "aten::bmm",
                                                           "aten::addmm", "aten::baddbmm"};
  const auto& schema = op.schema();
  const bool into = schema.overload_name() == "out";
  if (!(into || schema.overload_name().empty()) || products.count(schema.name()) == 0) {
    return false;
  }
  const auto n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < n - (into ? 1 : 0); ++i) {
    if (args[i].isTensor()) inputs.push_back(args[i].toTensor());
  }
  for (const auto& t : inputs) {
    if (!t.defined() || t.scalar_type() != at::kBFloat16 || t.device().type() != kHPU) {
      return false;
    }
  }
  std::vector<at::Tensor> wide;
  for (const auto& t : inputs) wide.push_back(on_host(t, /*widen=*/true));
  at::Tensor product;
  const auto& name = schema.name();
  if (name == "aten::mm") {
    product = at::mm(wide[0], wide[1]);
  } else if (name == "aten::bmm") {
    product = at::bmm(wide[0], wide[1]);
  } else if (name == "aten::addmm") {
    product = at::addmm(wide[0], wide[1], wide[2], args[3].toScalar(), args[4].toScalar());
  } else {
    product = at::baddbmm(wide[0], wide[1], wide[2], args[3].toScalar(), args[4].toScalar());
  }
  at::Tensor result;
  if (into) {
    result = args[n - 1].toTensor();
    if (result.scalar_type() != at::kBFloat16 || result.sizes() != product.sizes()) return false;
    result.copy_(product.to(at::kBFloat16));
  } else {
    result = on_hpu(product, /*narrow=*/true);
  }
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, result);
  return true;
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // every other op runs its CPU kernel on host copies of the inputs, and the results come
  // back to hpu; a view op that has no HPU kernel here is refused (a copy would not alias)
  counts::check_fallback_allowed(op);  // PT_HPU_PLACE_ON_CPU, first, as the bridge's fallback
  counts::op_reached(op, stack);  // before the call: the stack holds the inputs
  counts::Internal own;           // the fallback's host copies are the emulation's own
  if (bf16_product_in_fp32(op, stack)) return;
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace fake_hpu

namespace at {
using HPUHooks = fake_hpu::Hooks;  // the name getHPUHooks() asks the registry for
REGISTER_HPU_HOOKS(HPUHooks);
}  // namespace at

TORCH_LIBRARY_IMPL(aten, HPU, m) {
  m.impl("empty.memory_format", &fake_hpu::empty_memory_format);
  m.impl("empty_strided", &fake_hpu::empty_strided);
  m.impl("_copy_from", &fake_hpu::copy_from);
  m.impl("_copy_from_and_resize", &fake_hpu::copy_from_and_resize);
  m.impl("set_.source_Storage_storage_offset", &fake_hpu::set_storage);
  m.impl("set_.source_Storage", &fake_hpu::set_source);
  m.impl("as_strided", &fake_hpu::as_strided);
  m.impl("view", &at::native::view);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  m.impl("unfold", &at::native::unfold);
  m.impl("resize_", &at::native::resize_);
  m.impl("convolution_overrideable", &fake_hpu::convolution);
  m.impl("convolution_backward_overrideable", &fake_hpu::convolution_backward);
}

TORCH_LIBRARY_IMPL(_, HPU, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fake_hpu::fallback>());
}

// Autocast: the bridge registers an AutocastHPU kernel for every out-of-place overload of
// the ops named in three lists (hpu_ops/autocast_helpers.h @ 5a56187, unchanged in the newer
// copy ankurneog/gaudi-pytorch-bridge @ ea38cef): an op in the lower-precision list runs in
// the autocast dtype (default_lower_ops, line 34), else one in the fp32 list runs in fp32
// (default_fp32_ops, line 63), else one in the promote list runs in the widest input dtype
// (promote_list, line 121); the Hpu_KERNEL macro (line 285) checks them in that order, so
// `mul`, in both the lower and the promote list, is lowered. The lower and fp32 lists are
// read once, as the library loads, from the files PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST
// and PT_HPU_AUTOCAST_FP32_OPS_LIST name (one op a line), or are the defaults if a variable
// is unset or its file cannot be opened (load_list, hpu_ops/backend/autocast_helpers.cpp).
// Every other op passes through unchanged. The double registers the overloads a training or
// generation step reaches (the bridge's generated hpu_autocast_ops*.cpp registers every one).
// The norms the bridge runs with only their first input lowered (lower_first_ops, line 113);
// the CPU kernels cannot take a bf16 input with fp32 weights in backward ("Expected scalar
// types of X and dY are same"), so here every input is lowered: the output dtype (bf16) is
// the bridge's, the weights are rounded to bf16 for the op.
TORCH_LIBRARY_IMPL(_, AutocastHPU, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

namespace fake_hpu_autocast {

using OpSet = std::unordered_set<std::string>;

const OpSet kDefaultLower{
    "addmm", "addbmm", "batch_norm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "dot", "dropout",
    "feature_dropout", "group_norm", "instance_norm", "layer_norm", "leaky_relu", "linear",
    "matmul", "mean", "mm", "mul", "mv", "softmax", "log_softmax",
    "scaled_dot_product_attention"};
const OpSet kDefaultFp32{
    "acos", "addcdiv", "asin", "atan2", "bilinear", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cdist", "cosh", "cosine_embedding_loss",
    "cosine_similarity", "cross_entropy_loss", "dist", "div", "divide", "embedding",
    "embedding_bag", "erfinv", "exp", "expm1", "hinge_embedding_loss", "huber_loss", "kl_div",
    "l1_loss", "log", "log10", "log1p", "log2", "logsumexp", "margin_ranking_loss", "mse_loss",
    "multi_margin_loss", "multilabel_margin_loss", "nll_loss", "pdist", "poisson_nll_loss",
    "pow", "reciprocal", "renorm", "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss",
    "softplus", "tan", "topk", "triplet_margin_loss", "truediv", "true_divide"};
const OpSet kPromote{"add", "addcmul", "addcdiv", "cat", "div", "exp", "mul", "pow", "sub",
                     "iadd", "truediv", "stack"};

OpSet read_list(const char* variable, const OpSet& fallback) {
  const char* path = std::getenv(variable);
  if (path == nullptr) return fallback;
  std::ifstream file(path);
  if (!file.is_open()) {
    TORCH_WARN("Failed to open file with ops to autocast: ", path, ". Default list loaded.");
    return fallback;
  }
  OpSet ops;
  for (std::string line; std::getline(file, line);) ops.insert(line);
  return ops;
}

enum class Rule { none, lower, fp32, promote };

Rule rule_of(const char* op) {
  static const OpSet lower =
      read_list("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", kDefaultLower);
  static const OpSet fp32 = read_list("PT_HPU_AUTOCAST_FP32_OPS_LIST", kDefaultFp32);
  if (lower.count(op)) return Rule::lower;
  if (fp32.count(op)) return Rule::fp32;
  if (kPromote.count(op)) return Rule::promote;
  return Rule::none;
}

}  // namespace fake_hpu_autocast

// Registers one overload (REG, its function FN) of the op NAME by the rule of NAME.
#define FAKE_HPU_AUTOCAST_POLICY(POLICY, REG, FN)                                       \
  m.impl(TORCH_SELECTIVE_NAME("aten::" REG),                                            \
         &::at::autocast::WrapFunction<::at::autocast::CastPolicy::POLICY,               \
                                       c10::DeviceType::HPU, decltype(FN), decltype(FN), \
                                       &FN>::type::call)
#define FAKE_HPU_AUTOCAST(NAME, REG, FN)                                          \
  switch (fake_hpu_autocast::rule_of(NAME)) {                                     \
    case fake_hpu_autocast::Rule::lower:                                          \
      FAKE_HPU_AUTOCAST_POLICY(lower_precision_fp, REG, FN);                      \
      break;                                                                      \
    case fake_hpu_autocast::Rule::fp32:                                           \
      FAKE_HPU_AUTOCAST_POLICY(fp32, REG, FN);                                    \
      break;                                                                      \
    case fake_hpu_autocast::Rule::promote:                                        \
      FAKE_HPU_AUTOCAST_POLICY(promote, REG, FN);                                 \
      break;                                                                      \
    case fake_hpu_autocast::Rule::none:                                           \
      break;                                                                      \
  }
#define AUTOCAST1(OP) FAKE_HPU_AUTOCAST(#OP, #OP, ATEN_FN(OP))
#define AUTOCAST2(OP, OVERLOAD) FAKE_HPU_AUTOCAST(#OP, #OP "." #OVERLOAD, ATEN_FN2(OP, OVERLOAD))

TORCH_LIBRARY_IMPL(aten, AutocastHPU, m) {
  // the lower-precision list
  AUTOCAST1(mm) AUTOCAST1(addmm) AUTOCAST1(addbmm) AUTOCAST1(bmm) AUTOCAST1(baddbmm)
  AUTOCAST1(matmul) AUTOCAST1(linear) AUTOCAST1(dot) AUTOCAST1(mv)
  AUTOCAST1(conv1d) AUTOCAST1(conv2d) AUTOCAST1(conv3d)
  AUTOCAST1(conv_transpose1d) AUTOCAST2(conv_transpose2d, input)
  AUTOCAST2(conv_transpose3d, input)
  AUTOCAST1(scaled_dot_product_attention)
  AUTOCAST1(group_norm) AUTOCAST1(layer_norm) AUTOCAST1(instance_norm) AUTOCAST1(batch_norm)
  AUTOCAST1(dropout) AUTOCAST1(feature_dropout) AUTOCAST1(leaky_relu)
  AUTOCAST1(mean) AUTOCAST2(mean, dim) AUTOCAST2(mul, Tensor) AUTOCAST2(mul, Scalar)
  AUTOCAST2(softmax, int) AUTOCAST2(log_softmax, int)
  // the fp32 list
  AUTOCAST1(embedding) AUTOCAST1(embedding_bag) AUTOCAST1(cross_entropy_loss)
  AUTOCAST1(nll_loss) AUTOCAST1(nll_loss_nd) AUTOCAST1(mse_loss) AUTOCAST1(l1_loss)
  AUTOCAST1(smooth_l1_loss) AUTOCAST1(huber_loss) AUTOCAST1(kl_div)
  AUTOCAST1(binary_cross_entropy) AUTOCAST1(binary_cross_entropy_with_logits)
  AUTOCAST1(cosine_similarity) AUTOCAST1(softplus) AUTOCAST1(topk) AUTOCAST1(logsumexp)
  AUTOCAST1(exp) AUTOCAST1(expm1) AUTOCAST1(log) AUTOCAST1(log1p) AUTOCAST1(log2)
  AUTOCAST1(log10) AUTOCAST1(rsqrt) AUTOCAST1(reciprocal) AUTOCAST1(erfinv)
  AUTOCAST2(div, Tensor) AUTOCAST2(div, Scalar) AUTOCAST2(pow, Tensor_Tensor)
  AUTOCAST2(pow, Tensor_Scalar) AUTOCAST2(pow, Scalar) AUTOCAST1(addcdiv)
  // the promote list
  AUTOCAST2(add, Tensor) AUTOCAST2(add, Scalar) AUTOCAST2(sub, Tensor) AUTOCAST2(sub, Scalar)
  AUTOCAST1(addcmul) AUTOCAST1(cat) AUTOCAST1(stack)
}

namespace {
pybind11::dict memory_stats() {
  auto& s = fake_hpu::stats();
  std::lock_guard<std::mutex> g(s.lock);
  pybind11::dict d;
  d["Limit"] = fake_hpu::limit();
  d["InUse"] = s.in_use;
  d["MaxInUse"] = s.max_in_use;
  d["NumAllocs"] = s.num_allocs;
  d["NumFrees"] = s.num_frees;
  d["ActiveAllocs"] = s.num_allocs - s.num_frees;
  d["MaxAllocSize"] = s.max_alloc;
  d["TotalSystemAllocs"] = s.total_allocs;
  d["TotalSystemFrees"] = s.total_frees;
  d["TotalActiveAllocs"] = s.total_allocs - s.total_frees;
  return d;
}

// reset_peak_memory_stats: CoalescedStringentPooling::reset_peak_mem_stats
// (backend/synapse_helpers/pool_allocator/CoalescedStringentPoolAllocator.cpp:1352-1355
// @ 5a56187) sets the peak to 0, not to what is in use: MaxInUse stays below InUse until the
// next allocation raises it (MemoryStats::UpdateStats, device_mem_stats.h:135-141).
void reset_peak() {
  auto& s = fake_hpu::stats();
  std::lock_guard<std::mutex> g(s.lock);
  s.max_in_use = 0;
}

// reset_accumulated_memory_stats: CoalescedStringentPooling::clear_stats
// (backend/synapse_helpers/pool_allocator/CoalescedStringentPoolAllocator.cpp:1342
// @ 5a56187, the same @ ea38cef) zeroes the allocs and frees since the last clear and the
// largest allocation, and brings the peak down to what is in use; the totals stay.
void clear_stats() {
  auto& s = fake_hpu::stats();
  std::lock_guard<std::mutex> g(s.lock);
  s.num_allocs = s.num_frees = 0;
  s.max_in_use = s.in_use;
  s.max_alloc = 0;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("memory_stats", &memory_stats);
  m.def("set_bridge_loaded", [](bool v) { fake_hpu::bridge_loaded = v; });
  m.def("reset_peak_memory_stats", &reset_peak);
  m.def("clear_memory_stats", &clear_stats);
  fake_hpu::counts::bind(m);
}
