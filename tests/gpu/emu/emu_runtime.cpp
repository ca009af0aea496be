// The CPU emulation's runtime (cuda_emu.hpp): the block scheduler (CUDA threads as cooperative fibers on
// the calling OS thread), barriers, shared memory, the device-memory registry and the CUDA runtime calls.
#include <sys/mman.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/ledger.hpp"
#include "cuda_emu.hpp"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__x86_64__)
extern "C" void emu_ctx_switch(void** save_sp, void* load_sp);  // defined in the asm block below
extern "C" void emu_fiber_start();
#endif

namespace emu {
namespace {

// ---- context switching ---------------------------------------------------------------------------------
// x86-64: a hand-written switch of the callee-saved registers; the stack pointer is the context (the FP
// control words are the process's: no kernel changes them). Elsewhere: ucontext (slower: a system call per
// switch).
#if defined(__x86_64__)
asm(R"(
  .pushsection .text
  .globl emu_ctx_switch
  .type emu_ctx_switch,@function
emu_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_ctx_switch,.-emu_ctx_switch
  .globl emu_fiber_start
  .type emu_fiber_start,@function
emu_fiber_start:
  movq %r12, %rdi
  call emu_fiber_main
  ud2
  .size emu_fiber_start,.-emu_fiber_start
  .popsection
)");
#endif

struct Barrier {
  int expected = 0;  // live participants
  int arrived = 0;
  uint64_t generation = 0;
  void release_if_complete() {
    if (arrived > 0 && arrived >= expected) {
      arrived = 0;
      ++generation;
    }
  }
};

constexpr size_t kStackBytes = size_t(256) << 10;  // per fiber; only touched pages are committed

struct Fiber {
  char* stack = nullptr;  // mmap'd, kStackBytes, lowest page a guard
  void* sp = nullptr;
#if !defined(__x86_64__)
  ucontext_t ctx;
#endif
  dim3 tid;
  unsigned linear = 0;
  bool done = false;
  Barrier* waiting = nullptr;
  uint64_t wait_generation = 0;
  int shuffle_count = 0;
};

struct Warp {
  Barrier bar;
  uint64_t slots[2][32];
};

struct Scheduler {
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  void* sched_sp = nullptr;
#if !defined(__x86_64__)
  ucontext_t sched_ctx;
#endif
  Barrier block_bar;
  std::vector<Warp> warps;
  KernelBody body{};
  std::exception_ptr error;
  unsigned nthreads = 0;
  // shared memory
  std::vector<char> dyn_storage;
  char* dyn = nullptr;
  size_t dyn_bytes = 0;
  std::vector<void*> shared_seen;  // __shared__ arrays poisoned in this block
  size_t static_smem = 0, max_static_smem = 0;
  const char* kernel_name = "";
  bool in_kernel = false;
  bool warp_first = false;  // SINKLAB_EMU_SCHEDULE=warp (next_runnable)
};

Scheduler& sched() {
  static Scheduler s;
  return s;
}

// Switches from `from` to `to` (null: the scheduler's own context).
void switch_to(Scheduler& s, Fiber* from, Fiber* to) {
  s.current = to;
  if (to) threadIdx = to->tid;
#if defined(__x86_64__)
  emu_ctx_switch(from ? &from->sp : &s.sched_sp, to ? to->sp : s.sched_sp);
#else
  swapcontext(from ? &from->ctx : &s.sched_ctx, to ? &to->ctx : &s.sched_ctx);
#endif
}

bool runnable(const Fiber& f) { return !f.done && (!f.waiting || f.waiting->generation != f.wait_generation); }

// The next runnable thread after `after` in cyclic threadIdx order (after itself last), or null.
// SINKLAB_EMU_SCHEDULE picks between two orders a GPU may run threads in, each of which hides races the
// other shows: "block" (the default) hands on in threadIdx order, so every warp runs up to its next
// barrier before any warp goes past it; "warp" hands on to the lanes of `after`'s own warp first, so a
// warp runs ahead of the others as far as its warp-level barriers let it (a missing __syncthreads between
// other warps' writes and this warp's reads then reads what they have not written yet). tests/gpu/emulate.sh
// runs every test under both.
Fiber* next_runnable(Scheduler& s, unsigned after) {
  const unsigned n = s.nthreads;
  if (s.warp_first) {
    const unsigned first = after / 32 * 32, lanes = std::min(32u, n - first);
    for (unsigned k = 1; k <= lanes; ++k) {
      Fiber& f = s.fibers[first + (after - first + k) % lanes];
      if (runnable(f)) return &f;
    }
  }
  for (unsigned k = 1; k <= n; ++k) {
    Fiber& f = s.fibers[(after + k) % n];
    if (runnable(f)) return &f;
  }
  return nullptr;
}

// A thread that cannot go on (waiting, or done) hands the OS thread to the next runnable one; the
// scheduler gets it back when none is (the block is done, or deadlocked).
void pass_on(Scheduler& s, Fiber* f) { switch_to(s, f, next_runnable(s, f->linear)); }

void fiber_main_body(Fiber* f) {
  Scheduler& s = sched();
  try {
    s.body.call(s.body.ctx);
  } catch (...) {
    if (!s.error) s.error = std::current_exception();
  }
  f->done = true;
  // Leaving: the barriers of the block and the warp no longer wait for this thread.
  --s.block_bar.expected;
  s.block_bar.release_if_complete();
  Warp& w = s.warps[f->linear / 32];
  --w.bar.expected;
  w.bar.release_if_complete();
}

}  // namespace
}  // namespace emu

extern "C" void emu_fiber_main(emu::Fiber* f) {
  emu::fiber_main_body(f);
  emu::pass_on(emu::sched(), f);
  __builtin_trap();  // a finished thread is never resumed
}

namespace emu {
namespace {

#if !defined(__x86_64__)
void ucontext_entry(unsigned lo, unsigned hi) {
  Fiber* f = reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | uintptr_t(lo));
  emu_fiber_main(f);
}
#endif

void ensure_fibers(Scheduler& s, unsigned n) {
  while (s.fibers.size() < n) {
    Fiber f;
    void* mem = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) throw std::runtime_error("emu: cannot map a fiber stack");
    mprotect(mem, 4096, PROT_NONE);  // a stack overflow faults instead of corrupting the next stack
    f.stack = static_cast<char*>(mem);
    s.fibers.push_back(f);
  }
}

void start_fiber(Scheduler& s, Fiber& f) {
#if defined(__x86_64__)
  // The frame emu_ctx_switch pops: r15, r14, r13, r12 (the fiber: emu_fiber_start's argument), rbx, rbp,
  // then the return address; after its `ret` the stack pointer is top - 16, so emu_fiber_start's call
  // enters emu_fiber_main with the ABI's alignment.
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStackBytes) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 72);
  sp[0] = 0;                                 // r15
  sp[1] = 0;                                 // r14
  sp[2] = 0;                                 // r13
  sp[3] = reinterpret_cast<uint64_t>(&f);    // r12
  sp[4] = 0;                                 // rbx
  sp[5] = 0;                                 // rbp
  sp[6] = reinterpret_cast<uint64_t>(&emu_fiber_start);
  sp[7] = 0;
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack + 4096;
  f.ctx.uc_stack.ss_size = kStackBytes - 4096;
  f.ctx.uc_link = nullptr;
  const uintptr_t p = reinterpret_cast<uintptr_t>(&f);
  makecontext(&f.ctx, reinterpret_cast<void (*)()>(&ucontext_entry), 2, unsigned(p), unsigned(p >> 32));
#endif
  (void)s;
}

void wait_at(Scheduler& s, Barrier& b) {
  Fiber* f = s.current;
  if (!f) throw std::logic_error("emu: a barrier outside a kernel");
  if (++b.arrived >= b.expected) {  // the last to arrive releases everyone and goes on
    b.arrived = 0;
    ++b.generation;
    return;
  }
  f->waiting = &b;
  f->wait_generation = b.generation;
  pass_on(s, f);
  f->waiting = nullptr;
}

std::string format(const char* fmt, va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  return buf;
}

// ---- launch limits (the device's) -------------------------------------------------------------------
constexpr size_t kDefaultSmem = size_t(48) << 10;
constexpr size_t kOptinSmem = 166912;  // sm_80's per-block opt-in maximum (163 KiB); sm_90 allows 227 KiB
std::map<const void*, size_t>& smem_optin() {
  static std::map<const void*, size_t> m;
  return m;
}

cudaError_t g_last_error = cudaSuccess;
std::string g_last_detail;

}  // namespace

void set_last_error(cudaError_t e, const char* detail) {
  if (g_last_error == cudaSuccess) {
    g_last_error = e;
    g_last_detail = detail;
    std::fprintf(stderr, "emu: %s\n", detail);
  }
}

void set_max_dynamic_smem(const void* fn, int bytes) { smem_optin()[fn] = size_t(bytes); }

// ---- counting (cuda_emu.hpp) ------------------------------------------------------------------------------
namespace {
std::mutex g_count_mutex;
sinklab::ledger::DeviceEvents g_events;

sinklab::ledger::DeviceEvents take_events() {
  std::lock_guard<std::mutex> lock(g_count_mutex);
  sinklab::ledger::DeviceEvents e = std::move(g_events);
  g_events = {};
  return e;
}
void count(int64_t sinklab::ledger::DeviceEvents::*field) {
  std::lock_guard<std::mutex> lock(g_count_mutex);
  ++(g_events.*field);
}
// The ledger reads the counts through this (set at start-up: every emulated binary counts).
const bool g_counter_registered = [] {
  sinklab::ledger::set_device_counter(&take_events);
  return true;
}();
}  // namespace

bool count_only() {
  static const bool on = [] {
    const char* e = std::getenv("SINKLAB_EMU_COUNT_ONLY");
    return e && std::string(e) == "1";
  }();
  return on;
}
void count_library_call() { count(&sinklab::ledger::DeviceEvents::library_calls); }

void launch_impl(const char* name, const void* fn, dim3 grid, dim3 block, size_t dyn_smem, KernelBody body) {
  Scheduler& s = sched();
  if (s.in_kernel) throw std::logic_error("emu: a launch from inside a kernel (dynamic parallelism is not emulated)");
  const uint64_t nthreads = uint64_t(block.x) * block.y * block.z;
  char detail[512];
  auto fail = [&](cudaError_t e, const char* why) {
    std::snprintf(detail, sizeof detail, "launch of %s <<<(%u,%u,%u), (%u,%u,%u), %zu>>>: %s", name, grid.x, grid.y,
                  grid.z, block.x, block.y, block.z, dyn_smem, why);
    set_last_error(e, detail);
  };
  if (nthreads == 0 || nthreads > 1024 || block.z > 64) return fail(cudaErrorInvalidConfiguration, "bad block size");
  if (uint64_t(grid.x) * grid.y * grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    return fail(cudaErrorInvalidConfiguration, "bad grid size (an empty grid is an error on the device)");
  auto it = smem_optin().find(fn);
  const size_t smem_limit = it == smem_optin().end() ? kDefaultSmem : std::min(it->second, kOptinSmem);
  if (it != smem_optin().end() && it->second > kOptinSmem)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute asked for more dynamic shared memory than sm_80 has");
  if (dyn_smem > smem_limit) return fail(cudaErrorInvalidValue, "more dynamic shared memory than the kernel may use");
  {
    std::lock_guard<std::mutex> lock(g_count_mutex);
    ++g_events.launches;
    g_events.kernels.push_back({name, int64_t(nthreads) * grid.x * grid.y * grid.z});
  }
  if (count_only()) return;
  (void)g_counter_registered;

  ensure_fibers(s, unsigned(nthreads));
  s.nthreads = unsigned(nthreads);
  const char* schedule = std::getenv("SINKLAB_EMU_SCHEDULE");
  s.warp_first = schedule && std::string(schedule) == "warp";
  s.body = body;
  s.error = nullptr;
  s.kernel_name = name;
  s.dyn_bytes = dyn_smem;
  s.dyn_storage.resize(dyn_smem + 256);
  s.dyn = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(s.dyn_storage.data()) + 127) & ~uintptr_t(127));
  s.max_static_smem = 0;
  blockDim = block;
  gridDim = grid;
  const unsigned nwarps = unsigned((nthreads + 31) / 32);
  s.warps.resize(nwarps);
  s.in_kernel = true;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        std::memset(s.dyn, 0xff, dyn_smem);
        s.shared_seen.clear();
        s.static_smem = 0;
        s.block_bar = Barrier{int(nthreads), 0, 0};
        for (unsigned w = 0; w < nwarps; ++w) {
          s.warps[w].bar = Barrier{int(std::min<uint64_t>(32, nthreads - w * 32)), 0, 0};
          std::memset(s.warps[w].slots, 0xff, sizeof s.warps[w].slots);
        }
        for (unsigned t = 0; t < nthreads; ++t) {
          Fiber& f = s.fibers[t];
          f.linear = t;
          f.tid = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
          f.done = false;
          f.waiting = nullptr;
          f.shuffle_count = 0;
          start_fiber(s, f);
        }
        switch_to(s, nullptr, &s.fibers[0]);  // back here when no thread can run
        for (unsigned t = 0; t < nthreads; ++t)
          if (!s.fibers[t].done) {
            s.in_kernel = false;
            throw std::runtime_error(std::string("emu: kernel ") + name + " deadlocked (threads wait at barriers "
                                     "that others never reach)");
          }
        s.max_static_smem = std::max(s.max_static_smem, s.static_smem);
        if (s.error) {
          s.in_kernel = false;
          std::exception_ptr e = s.error;
          s.error = nullptr;
          std::rethrow_exception(e);
        }
        if (s.static_smem > kDefaultSmem || s.static_smem + dyn_smem > smem_limit) {
          s.in_kernel = false;
          return fail(cudaErrorInvalidValue, "static + dynamic shared memory exceed the kernel's limit");
        }
      }
  s.in_kernel = false;
}

void sync_block() { wait_at(sched(), sched().block_bar); }
void sync_warp() {
  Scheduler& s = sched();
  if (!s.current) throw std::logic_error("emu: __syncwarp outside a kernel");
  wait_at(s, s.warps[s.current->linear / 32].bar);
}
unsigned linear_tid() { return sched().current->linear; }
unsigned lane_id() { return sched().current->linear % 32; }
unsigned warp_id() { return sched().current->linear / 32; }
unsigned warp_width() {
  const Scheduler& s = sched();
  return std::min(32u, s.nthreads - s.current->linear / 32 * 32);
}
uint64_t* shuffle_slot(int parity, unsigned lane) {
  Scheduler& s = sched();
  return &s.warps[s.current->linear / 32].slots[parity][lane];
}
int next_shuffle_parity() { return sched().current->shuffle_count++ & 1; }
char* dynamic_smem() { return sched().dyn; }
void shared_decl(void* p, size_t bytes) {
  Scheduler& s = sched();
  for (void* q : s.shared_seen)
    if (q == p) return;
  s.shared_seen.push_back(p);
  s.static_smem += bytes;
  std::memset(p, 0xff, bytes);
}

void kernel_fault(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = format(fmt, ap);
  va_end(ap);
  const Scheduler& s = sched();
  char where[256];
  std::snprintf(where, sizeof where, "emu: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", s.kernel_name,
                blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  throw std::runtime_error(where + msg);
}

// ---- device memory --------------------------------------------------------------------------------------
namespace {
struct Block {
  size_t bytes;
  int device;
};
std::mutex g_mem_mutex;
std::map<uintptr_t, Block>& blocks() {
  static std::map<uintptr_t, Block> m;
  return m;
}
int g_current_device = 0;
}  // namespace

int device_count() {
  static const int n = [] {
    const char* e = std::getenv("SINKLAB_EMU_DEVICES");
    const int v = e ? std::atoi(e) : 1;
    return v < 0 ? 0 : v;
  }();
  return n;
}

int device_of_range(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks().upper_bound(a);
  if (it == blocks().begin()) return -1;
  --it;
  if (a >= it->first && a + bytes <= it->first + it->second.bytes) return it->second.device;
  return -1;
}

void require_device_range(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  if (device_of_range(p, bytes) < 0) {
    char msg[512];
    std::snprintf(msg, sizeof msg, "emu: %s: [%p, +%zu bytes) is not inside one device allocation", what, p, bytes);
    throw std::runtime_error(msg);
  }
}

void require_host_range(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks().upper_bound(a + bytes - 1);
  if (it != blocks().begin()) {
    --it;
    if (it->first + it->second.bytes > a) {
      char msg[512];
      std::snprintf(msg, sizeof msg, "emu: %s: host range [%p, +%zu bytes) is device memory", what, p, bytes);
      throw std::runtime_error(msg);
    }
  }
}

}  // namespace emu

// ---- the runtime API -------------------------------------------------------------------------------------
using emu::g_current_device;

cudaError_t cudaGetDeviceCount(int* n) {
  *n = emu::device_count();
  return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaGetDevice(int* d) {
  *d = g_current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= emu::device_count()) return cudaErrorInvalidDevice;
  g_current_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d < 0 || d >= emu::device_count()) return cudaErrorInvalidDevice;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "sinklab CPU emulation (tests/gpu/emu), device %d", d);
  p->totalGlobalMem = size_t(16) << 30;
  p->sharedMemPerBlock = size_t(48) << 10;
  p->sharedMemPerBlockOptin = 166912;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  emu::count(&sinklab::ledger::DeviceEvents::host_syncs);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  emu::count(&sinklab::ledger::DeviceEvents::allocations);
  void* mem = nullptr;
  if (emu::count_only()) {  // mapped, never touched: a 1B model's buffers cost no host memory
    mem = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return cudaErrorMemoryAllocation;
  } else {
    mem = std::aligned_alloc(256, rounded);
    if (!mem) return cudaErrorMemoryAllocation;
    std::memset(mem, 0xff, rounded);  // NaN as f32 / bf16: an element no kernel wrote shows
  }
  {
    std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
    emu::blocks()[reinterpret_cast<uintptr_t>(mem)] = emu::Block{std::max<size_t>(bytes, 1), g_current_device};
  }
  *p = mem;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
    auto it = emu::blocks().find(reinterpret_cast<uintptr_t>(p));
    if (it == emu::blocks().end()) return cudaErrorInvalidValue;
    bytes = it->second.bytes;
    emu::blocks().erase(it);
  }
  emu::count(&sinklab::ledger::DeviceEvents::allocations);
  emu::count(&sinklab::ledger::DeviceEvents::host_syncs);  // cudaFree waits for the device
  if (emu::count_only()) munmap(p, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  else std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = std::malloc(std::max<size_t>(bytes, 1));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = size_t(8) << 30;
  *total_bytes = size_t(16) << 30;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

namespace emu {
namespace {
// A copy's checks and its data (not moved under count_only).
cudaError_t copy_bytes(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice:
      emu::require_device_range(dst, bytes, "cudaMemcpy HostToDevice (dst)");
      emu::require_host_range(src, bytes, "cudaMemcpy HostToDevice (src)");
      break;
    case cudaMemcpyDeviceToHost:
      emu::require_device_range(src, bytes, "cudaMemcpy DeviceToHost (src)");
      emu::require_host_range(dst, bytes, "cudaMemcpy DeviceToHost (dst)");
      break;
    case cudaMemcpyDeviceToDevice:
      emu::require_device_range(dst, bytes, "cudaMemcpy DeviceToDevice (dst)");
      emu::require_device_range(src, bytes, "cudaMemcpy DeviceToDevice (src)");
      break;
    case cudaMemcpyHostToHost:
      emu::require_host_range(dst, bytes, "cudaMemcpy HostToHost (dst)");
      emu::require_host_range(src, bytes, "cudaMemcpy HostToHost (src)");
      break;
    case cudaMemcpyDefault:
      break;
  }
  count(&sinklab::ledger::DeviceEvents::copies);
  if (bytes && !count_only()) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
}  // namespace
}  // namespace emu

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  emu::count(&sinklab::ledger::DeviceEvents::host_syncs);  // the blocking copy waits for the device
  return emu::copy_bytes(dst, src, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return emu::copy_bytes(dst, src, bytes, kind);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes, cudaStream_t) {
  emu::require_device_range(dst, bytes, "cudaMemcpyPeerAsync (dst)");
  emu::require_device_range(src, bytes, "cudaMemcpyPeerAsync (src)");
  if (bytes && (emu::device_of_range(dst, bytes) != dst_device || emu::device_of_range(src, bytes) != src_device))
    return cudaErrorInvalidValue;
  emu::count(&sinklab::ledger::DeviceEvents::copies);
  if (bytes && !emu::count_only()) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  emu::require_device_range(p, bytes, "cudaMemset");
  emu::count(&sinklab::ledger::DeviceEvents::copies);
  if (bytes && !emu::count_only()) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st{g_current_device};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  emu::count(&sinklab::ledger::DeviceEvents::host_syncs);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  return e ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st{g_current_device};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { return e ? cudaSuccess : cudaErrorInvalidResourceHandle; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  emu::count(&sinklab::ledger::DeviceEvents::host_syncs);
  return e ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return emu::g_last_error; }
const char* cudaGetErrorString(cudaError_t e) {
  if (e == emu::g_last_error && !emu::g_last_detail.empty()) return emu::g_last_detail.c_str();
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
