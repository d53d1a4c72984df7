// For runs of the emulated-HPU tests on PyPI's torch wheels (CUDA builds), outside CI only
// (scripts/old-torch/run.sh). Since torch 2.7, at::getAccelerator takes every backend whose
// hooks say isBuilt(), and refuses two ("Cannot have both HPU and cuda"): a CUDA wheel and the
// bridge double's HPU hooks then clash. Intel's torch is a CPU-only build, which never meets
// this. This registers CUDA's hooks as not built, at a priority above the wheel's own
// registration (c10/util/Registry.h: a higher priority wins, a lower one is skipped), so it
// must load before libtorch_cuda does: the venv's .pth file loads it before `import torch`.
#include <ATen/detail/CUDAHooksInterface.h>

namespace at {
struct NoCUDAHooks : CUDAHooksInterface {
  explicit NoCUDAHooks(CUDAHooksArgs) {}
  bool isBuilt() const override { return false; }
  bool hasCUDA() const override { return false; }
};
}  // namespace at

static c10::Registerer<std::string, std::unique_ptr<at::CUDAHooksInterface>, at::CUDAHooksArgs>
    no_cuda("CUDAHooks", c10::REGISTRY_PREFERRED, at::CUDAHooksRegistry(),
            [](at::CUDAHooksArgs args) -> std::unique_ptr<at::CUDAHooksInterface> {
              return std::make_unique<at::NoCUDAHooks>(args);
            });
