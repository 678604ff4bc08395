// The emulated `npu` device: a PrivateUse1 backend whose memory is host memory.
//
// Tensors on `npu` have real storage (a real data_ptr) from an allocator that accounts every
// byte against an emulated HBM capacity per device. Ops registered here for PrivateUse1
// (factories, copies, resize/set, the two views the dispatcher needs) are native; every other
// op reaches a boxed fallback that runs the CPU kernel on CPU tensors aliasing the same memory
// and wraps the results back onto `npu` (also for `scaled_dot_product_attention`, whose composite
// would otherwise take its slow path on an unknown device). A kernel registered for PrivateUse1 elsewhere (the
// `ascend` ops' adapters) wins over the fallback, as it does with real torch_npu.
//
// Large allocations are anonymous mappings the host backs page by page on first write, and
// `zero_` of one releases its whole pages: vLLM sizes its KV cache to the emulated HBM (32 GiB
// by default) and zero-fills it, which host RAM could not back; only the blocks a run writes
// cost host memory. The accounting is unchanged: every byte counts against the emulated HBM.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_set>
#include <vector>

namespace npu_emu {

constexpr int kMaxDevices = 64;
constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

// ------------------------------------------------------------------ devices and memory
std::atomic<int> g_device_count{0};
thread_local c10::DeviceIndex t_current_device = 0;

struct DeviceMemory {
  std::atomic<int64_t> capacity{0};
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> num_allocs{0};
  std::atomic<int64_t> num_frees{0};
  std::atomic<int64_t> num_ooms{0};
  std::atomic<int64_t> current_blocks{0};
};
DeviceMemory g_memory[kMaxDevices];

void check_index(int64_t index) {
  TORCH_CHECK(index >= 0 && index < g_device_count.load(),
              "Invalid device id ", index, ": the emulation has ", g_device_count.load(),
              " NPU(s) (VLLM_ASCEND_EMULATED_NPUS)");
}

std::string gib(int64_t bytes) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  if (bytes >= (int64_t(1) << 30)) {
    out << double(bytes) / double(int64_t(1) << 30) << " GiB";
  } else {
    out << double(bytes) / double(1 << 20) << " MiB";
  }
  return out.str();
}

constexpr size_t kHeader = 64;  // keeps the data 64-byte aligned after the header

struct Allocation {
  int64_t size;
  c10::DeviceIndex device;
  bool mapped;  // an anonymous mapping of kHeader + size bytes (else c10::alloc_cpu)
};

// From this size up, an allocation is a lazily backed mapping (see the file comment).
constexpr size_t kMappedFrom = size_t(1) << 20;

void free_allocation(void* ctx) {
  auto* alloc = static_cast<Allocation*>(ctx);
  // The data sits right after the header (see NpuAllocator::allocate).
  DeviceMemory& mem = g_memory[alloc->device];
  mem.allocated -= alloc->size;
  mem.num_frees += 1;
  mem.current_blocks -= 1;
  if (alloc->mapped) {
    munmap(alloc, kHeader + static_cast<size_t>(alloc->size));
  } else {
    c10::free_cpu(alloc);
  }
}


struct NpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = t_current_device;
    check_index(device);
    DeviceMemory& mem = g_memory[device];
    int64_t size = static_cast<int64_t>(nbytes);
    int64_t before = mem.allocated.fetch_add(size);
    int64_t capacity = mem.capacity.load();
    if (before + size > capacity) {
      mem.allocated -= size;
      mem.num_ooms += 1;
      int64_t free_bytes = std::max<int64_t>(capacity - before, 0);
      TORCH_CHECK_WITH(OutOfMemoryError, false,
          "NPU out of memory. Tried to allocate ", gib(size), " (NPU ", int(device), "; ",
          gib(capacity), " total capacity; ", gib(before), " already allocated; ",
          gib(before), " current active; ", gib(free_bytes), " free; ", gib(before),
          " reserved in total by PyTorch) (emulated HBM: VLLM_ASCEND_EMULATED_HBM_GIB)");
    }
    int64_t peak = mem.peak.load();
    while (before + size > peak && !mem.peak.compare_exchange_weak(peak, before + size)) {
    }
    mem.num_allocs += 1;
    mem.current_blocks += 1;
    bool mapped = nbytes >= kMappedFrom;
    void* raw = nullptr;
    if (mapped) {
      raw = mmap(nullptr, kHeader + nbytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (raw == MAP_FAILED) {
        mem.allocated -= size;
        mem.num_allocs -= 1;
        mem.current_blocks -= 1;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory: the host could not map ",
                         gib(size), " for the emulated NPU ", int(device));
      }
    } else {
      raw = c10::alloc_cpu(kHeader + nbytes);
    }
    auto* header = new (raw) Allocation{size, device, mapped};
    void* data = static_cast<char*>(raw) + kHeader;
    return {data, header, &free_allocation, c10::Device(kNpu, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
NpuAllocator g_allocator;

// Grow or shrink a storage of npu memory, keeping its leading bytes.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::DeviceGuard guard(storage.device());
  at::DataPtr fresh = g_allocator.allocate(nbytes);
  size_t keep = std::min(nbytes, storage.nbytes());
  if (keep > 0 && storage.data() != nullptr) std::memcpy(fresh.get(), storage.data(), keep);
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

// Pinned host memory: plain host memory, remembered so is_pinned() answers true.
std::mutex g_pinned_mutex;
std::unordered_set<void*> g_pinned;

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};
PinnedAllocator g_pinned_allocator;
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned_allocator)

// ------------------------------------------------------------------ device guard
struct Event {
  double recorded_ms = 0.0;
};

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

std::atomic<c10::StreamId> g_next_stream{1};
thread_local c10::StreamId t_current_stream[kMaxDevices] = {};

// Streams are synchronous (every op completes before it returns), so events and stream
// waits have nothing to wait for; event timing is wall-clock.
struct NpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNpu, t_current_device); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNpu, "expected an npu device, got ", d);
    check_index(d.index());
    t_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kMaxDevices) t_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, t_current_stream[d.index()]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return getNewStream(d, 0);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, g_next_stream++);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream old = getStream(s.device());
    t_current_stream[s.device_index()] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Event*>(event);
  }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new Event();
    static_cast<Event*>(*event)->recorded_ms = now_ms();
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  double elapsedTime(void* e1, void* e2, const c10::DeviceIndex) const override {
    TORCH_CHECK(e1 && e2, "Both events must be recorded before calculating elapsed time.");
    return static_cast<Event*>(e2)->recorded_ms - static_cast<Event*>(e1)->recorded_ms;
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);

// ------------------------------------------------------------------ hooks
struct NpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_device_count.load() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    check_index(d);
    t_current_device = d;
  }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = t_current_device;
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  // Random numbers come from CPU generators (an emulation difference: the device has its own).
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(kNpu, t_current_device); }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(const_cast<void*>(data)) > 0;
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};
NpuHooks* g_hooks = nullptr;

// ------------------------------------------------------------------ native kernels
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNpu, t_current_device)));
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, &g_allocator, keys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNpu, t_current_device)));
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, keys,
                                           c10::dtype_or_default(dtype));
}

// A CPU tensor viewing the memory of an npu tensor (same sizes, strides and dtype).
at::Tensor cpu_alias(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNpu) return t;
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                           at::DataPtr(t.storage().mutable_data(), c10::Device(c10::kCPU)),
                           // Resizable: an out= kernel may resize it; sync_back() then moves
                           // the result into the npu tensor.
                           c10::GetCPUAllocator(), /*resizable=*/true);
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(cpu_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src_cpu = cpu_alias(self);
  at::Tensor dst_cpu = cpu_alias(dst);
  dst_cpu.copy_(src_cpu);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  int64_t numel = c10::multiply_integers(sizes);
  size_t needed = (impl->storage_offset() + numel) * self.dtype().itemsize();
  if (numel > 0 && needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage(), needed);
  }
  impl->set_sizes_contiguous(sizes);
  auto format = memory_format.value_or(at::MemoryFormat::Contiguous);
  if (format != at::MemoryFormat::Preserve) impl->empty_tensor_restride(format);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                        c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto strides = C10_AS_INTARRAYREF_SLOW(stride);
  int64_t off = offset.expect_int();
  at::native::checkSetStorage(self, std::move(source), off, sizes, strides);
  self.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, off);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  std::vector<int64_t> size{numel};
  std::vector<int64_t> stride{1};
  return set_storage(self, std::move(source), 0, c10::fromIntArrayRefSlow(size),
                     c10::fromIntArrayRefSlow(stride));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.sym_storage_offset(), source.sym_sizes(),
                     source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true);
  std::vector<int64_t> size{0};
  std::vector<int64_t> stride{1};
  return set_storage(self, std::move(storage), 0, c10::fromIntArrayRefSlow(size),
                     c10::fromIntArrayRefSlow(stride));
}

at::Tensor make_view(const at::Tensor& base, c10::IntArrayRef size, c10::IntArrayRef stride,
                     int64_t offset, caffe2::TypeMeta dtype) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(), dtype);
  out.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return out;
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  int64_t off = storage_offset.has_value() ? storage_offset->expect_int() : self.storage_offset();
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto strides = C10_AS_INTARRAYREF_SLOW(stride);
  at::native::checkInBoundsForStorage(sizes, strides, off, self.dtype(), self.storage());
  return make_view(self, sizes, strides, off, self.dtype());
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto inferred = at::infer_size_dv(sizes, self.numel());
  auto stride = at::detail::computeStride(self.sizes(), self.strides(), inferred);
  TORCH_CHECK(stride.has_value(),
              "view size is not compatible with input tensor's size and stride (at least one "
              "dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
  return make_view(self, inferred, *stride, self.storage_offset(), self.dtype());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return make_view(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                   self.storage_offset(), self.dtype());
}

void record_stream(at::Tensor& self, c10::Stream stream) {}

// ------------------------------------------------------------------ the boxed fallback
struct Origin {
  at::Tensor npu;       // the argument as the caller passed it
  at::Tensor cpu;       // its CPU alias, as the CPU kernel sees it
};

bool is_npu(const at::Tensor& t) { return t.defined() && t.device().type() == kNpu; }

void check_same_device(const c10::OperatorHandle& op, const std::vector<at::Tensor>& tensors) {
  const at::Tensor* npu = nullptr;
  const at::Tensor* cpu = nullptr;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (is_npu(t)) {
      if (npu && npu->device() != t.device()) {
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
                    "two devices, ", npu->device(), " and ", t.device(), "! (when checking "
                    "arguments for ", op.schema().name(), ")");
      }
      npu = &t;
    } else if (t.device().is_cpu() && t.dim() > 0) {
      cpu = &t;
    }
  }
  if (npu && cpu) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", npu->device(), " and cpu! (when checking arguments for ",
                op.schema().name(), ")");
  }
}

at::Tensor to_npu(const at::Tensor& result, const std::vector<Origin>& origins,
                  c10::Device device) {
  if (!result.defined() || is_npu(result)) return result;
  for (const auto& o : origins) {
    if (result.is_same(o.cpu)) return o.npu;
  }
  if (result.device().is_cpu() && result.has_storage()) {
    const char* ptr = static_cast<const char*>(result.storage().data());
    for (const auto& o : origins) {
      const char* base = static_cast<const char*>(o.npu.storage().data());
      size_t nbytes = o.npu.storage().nbytes();
      if (ptr != nullptr && ptr >= base && ptr < base + std::max<size_t>(nbytes, 1)) {
        // A view of an argument's memory: the same view of the npu storage.
        size_t item = result.dtype().itemsize();
        size_t byte_offset = (ptr - base) + result.storage_offset() * item;
        TORCH_INTERNAL_ASSERT(byte_offset % item == 0);
        return make_view(o.npu, result.sizes(), result.strides(), byte_offset / item,
                         result.dtype());
      }
    }
  }
  if (!result.device().is_cpu()) return result;
  c10::DeviceGuard guard(device);
  at::Tensor out = empty_strided(result.sizes(), result.strides(), result.scalar_type(),
                                 std::nullopt, device, std::nullopt);
  cpu_alias(out).copy_(result);
  return out;
}

// After the CPU kernel: an argument it resized (out= kernels) gets the new shape on npu.
void sync_back(const Origin& o) {
  const at::Tensor& alias = o.cpu;
  auto* impl = o.npu.unsafeGetTensorImpl();
  if (alias.storage().data() != o.npu.storage().data()) {
    c10::DeviceGuard guard(o.npu.device());
    std::vector<int64_t> size(alias.sizes().begin(), alias.sizes().end());
    resize_(o.npu, c10::fromIntArrayRefSlow(size), std::nullopt);
    impl->set_sizes_and_strides(alias.sizes(), alias.strides(), o.npu.storage_offset());
    cpu_alias(o.npu).copy_(alias);
  } else if (alias.sizes() != o.npu.sizes() || alias.strides() != o.npu.strides() ||
             alias.storage_offset() != o.npu.storage_offset()) {
    impl->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
  }
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  auto args = torch::jit::last(stack, num_args);
  const size_t first = stack->size() - num_args;

  std::vector<at::Tensor> tensors;
  for (const auto& a : args) {
    if (a.isTensor()) {
      tensors.push_back(a.toTensor());
    } else if (a.isTensorList()) {
      for (const at::Tensor& t : a.toTensorList()) tensors.push_back(t);
    } else if (a.isList()) {
      for (const auto& e : a.toListRef()) {
        if (e.isTensor()) tensors.push_back(e.toTensor());
      }
    }
  }
  check_same_device(op, tensors);

  std::optional<c10::Device> device;
  for (const auto& t : tensors) {
    if (is_npu(t)) { device = t.device(); break; }
  }
  std::vector<Origin> origins;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& a = (*stack)[first + i];
    if (a.isTensor()) {
      const at::Tensor& t = a.toTensor();
      if (is_npu(t)) {
        at::Tensor alias = cpu_alias(t);
        origins.push_back({t, alias});
        a = alias;
      }
    } else if (a.isTensorList()) {
      auto list = a.toTensorList();
      c10::List<at::Tensor> converted;
      for (const at::Tensor& t : list) {
        if (is_npu(t)) {
          at::Tensor alias = cpu_alias(t);
          origins.push_back({t, alias});
          converted.push_back(alias);
        } else {
          converted.push_back(t);
        }
      }
      a = converted;
    } else if (a.isOptionalTensorList()) {
      auto list = a.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> converted;
      for (std::optional<at::Tensor> t : list) {
        if (t.has_value() && is_npu(*t)) {
          at::Tensor alias = cpu_alias(*t);
          origins.push_back({*t, alias});
          converted.push_back(alias);
        } else {
          converted.push_back(t);
        }
      }
      a = converted;
    } else if (a.isDevice() && a.toDevice().type() == kNpu) {
      if (!device) device = a.toDevice();
      a = c10::IValue(c10::Device(c10::kCPU));
    }
  }
  c10::Device target = device.value_or(c10::Device(kNpu, t_current_device));
  if (target.index() < 0) target = c10::Device(kNpu, t_current_device);

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  for (const auto& o : origins) sync_back(o);

  const size_t num_returns = schema.returns().size();
  const size_t ret_first = stack->size() - num_returns;
  for (size_t i = 0; i < num_returns; ++i) {
    c10::IValue& r = (*stack)[ret_first + i];
    if (r.isTensor()) {
      r = to_npu(r.toTensor(), origins, target);
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> converted;
      for (const at::Tensor& t : r.toTensorList()) converted.push_back(to_npu(t, origins, target));
      r = converted;
    }
  }
}

// ------------------------------------------------------------------ Python-facing controls
void setup(int64_t device_count, int64_t capacity_bytes) {
  TORCH_CHECK(device_count >= 0 && device_count <= kMaxDevices,
              "the emulation supports 0..", kMaxDevices, " NPUs, not ", device_count);
  g_device_count = static_cast<int>(device_count);
  for (int i = 0; i < kMaxDevices; ++i) g_memory[i].capacity = capacity_bytes;
  if (g_hooks == nullptr) {
    g_hooks = new NpuHooks();
    at::RegisterPrivateUse1HooksInterface(g_hooks);
  }
}

int64_t device_count() { return g_device_count.load(); }
int64_t current_device() { return t_current_device; }
void set_device(int64_t index) {
  check_index(index);
  t_current_device = static_cast<c10::DeviceIndex>(index);
}

std::map<std::string, int64_t> memory_stats(int64_t index) {
  check_index(index);
  DeviceMemory& mem = g_memory[index];
  return {{"capacity", mem.capacity.load()},
          {"allocated", mem.allocated.load()},
          {"peak", mem.peak.load()},
          {"num_allocs", mem.num_allocs.load()},
          {"num_frees", mem.num_frees.load()},
          {"num_ooms", mem.num_ooms.load()},
          {"blocks", mem.current_blocks.load()}};
}

void reset_peak(int64_t index) {
  check_index(index);
  g_memory[index].peak = g_memory[index].allocated.load();
}

// `zero_`: the whole pages of a contiguous tensor in a mapped allocation are handed back to
// the host (they read as zeros again), the ragged ends are cleared; anything else is filled.
at::Tensor& zero_(at::Tensor& self) {
  const c10::DataPtr& base = self.storage().data_ptr();
  auto* alloc = base.get_deleter() == &free_allocation
                    ? static_cast<Allocation*>(base.get_context()) : nullptr;
  if (alloc == nullptr || !alloc->mapped || !self.is_contiguous() || self.numel() == 0) {
    return self.fill_(0);
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(self.data_ptr());
  const uintptr_t end = begin + static_cast<uintptr_t>(self.nbytes());
  const uintptr_t first = (begin + page - 1) & ~(page - 1);
  const uintptr_t last = end & ~(page - 1);
  if (last <= first) {
    std::memset(reinterpret_cast<void*>(begin), 0, end - begin);
    return self;
  }
  std::memset(reinterpret_cast<void*>(begin), 0, first - begin);
  TORCH_CHECK(madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0,
              "madvise(MADV_DONTNEED) failed on the emulated NPU's memory");
  std::memset(reinterpret_cast<void*>(last), 0, end - last);
  return self;
}

}  // namespace npu_emu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("zero_", &npu_emu::zero_);
  m.impl("empty.memory_format", &npu_emu::empty_memory_format);
  m.impl("empty_strided", &npu_emu::empty_strided);
  m.impl("_copy_from", &npu_emu::copy_from);
  m.impl("_copy_from_and_resize", &npu_emu::copy_from_and_resize);
  m.impl("resize_", &npu_emu::resize_);
  m.impl("set_.source_Storage_storage_offset", &npu_emu::set_storage);
  m.impl("set_.source_Storage", &npu_emu::set_source_storage);
  m.impl("set_.source_Tensor", &npu_emu::set_source_tensor);
  m.impl("set_", &npu_emu::set_empty);
  m.impl("as_strided", &npu_emu::as_strided);
  m.impl("view", &npu_emu::view);
  m.impl("_reshape_alias", &npu_emu::reshape_alias);
  m.impl("record_stream", &npu_emu::record_stream);
  // Attention as one op (torch_npu registers its own fused kernel for it): the CPU kernel on
  // the aliases, instead of the composite's math fallback for an unknown device, which
  // copies K and V per query head (GQA) and runs 3-15x slower.
  m.impl("scaled_dot_product_attention",
         torch::CppFunction::makeFromBoxedFunction<&npu_emu::fallback>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&npu_emu::fallback>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("setup", &npu_emu::setup, "set the device count and the HBM capacity per device");
  m.def("device_count", &npu_emu::device_count);
  m.def("current_device", &npu_emu::current_device);
  m.def("set_device", &npu_emu::set_device);
  m.def("memory_stats", &npu_emu::memory_stats);
  m.def("reset_peak", &npu_emu::reset_peak);
}
