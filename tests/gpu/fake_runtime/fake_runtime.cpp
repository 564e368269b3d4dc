/*
 * tests/gpu/fake_runtime/fake_runtime.cpp: the fake CUDA runtime
 * (fake_cuda_runtime.h): devices, memory, streams, events, stream capture
 * and graphs, on the host.
 *
 * Work runs when it is issued, in issue order (a device that is infinitely
 * fast), except on a stream being captured: then it is recorded into the
 * capture's graph and runs at each cudaGraphLaunch. One lock serialises the
 * whole runtime. Environment:
 *   KVC_FAKE_GPU_DEVICES=<n>   devices (default 2; 0: cudaErrorNoDevice)
 *   KVC_FAKE_GPU_POOLS=0       claim no stream-ordered allocator
 *   KVC_FAKE_GPU_DRIVER=<v>    the driver's CUDA version (default the runtime's; older: insufficient driver)
 *   KVC_FAKE_GPU_NO_IMAGE=1    kernels have no image for the devices
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "fake_cuda_runtime.h"
#include "fake_internal.h"

namespace {

enum mem_kind { MEM_DEVICE, MEM_PINNED };

struct allocation {
  size_t bytes;
  mem_kind kind;
  int device;
  const void* graph; /* the graph whose capture allocated it (released with the graph unless freed before) */
};

struct capture_state;

struct graph_body {
  std::vector<std::function<void()>> ops;
  std::vector<void*> owned; /* device memory the capture allocated: released with the last holder of the graph */
  ~graph_body();
};

}  // namespace

struct kvc_fake_stream {
  int device;
  capture_state* capture = nullptr; /* the capture this stream records into */
  size_t ops = 0;                  /* operations recorded into the capture */
  size_t joined = 0;               /* ... of which another stream of the capture has waited for */
};

struct kvc_fake_event {
  int device;
  capture_state* captured = nullptr; /* last recorded inside this capture (still going) */
  kvc_fake_stream* stream = nullptr;
  size_t stream_ops = 0;
};

struct kvc_fake_mem_pool {
  uint64_t release_threshold = 0; /* CUDA's default: freed memory goes back at every synchronisation */
};

struct kvc_fake_graph {
  std::shared_ptr<graph_body> body;
};
struct kvc_fake_graph_exec {
  std::shared_ptr<graph_body> body;
};

namespace {

struct capture_state {
  kvc_fake_stream* origin;
  cudaStreamCaptureMode mode;
  bool invalid = false;
  std::shared_ptr<graph_body> body = std::make_shared<graph_body>();
  std::vector<kvc_fake_stream*> members;
};

std::recursive_mutex mu;
std::map<uintptr_t, allocation> allocations;
std::vector<capture_state*> captures;
int device_count = -1;
int pools = 1, driver = CUDART_VERSION, no_image = 0;
int contexts[64];
kvc_fake_mem_pool mem_pools[64];
long violations, launches;

thread_local int current = -1; /* -1: never set, reads as 0 */
thread_local cudaError_t last_error = cudaSuccess;
thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

graph_body::~graph_body() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  for (void* p : owned) {
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end() || it->second.graph != this) continue; /* freed outside the graph already */
    allocations.erase(it);
    free(p);
  }
}

int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

void init() {
  if (device_count >= 0) return;
  device_count = env_int("KVC_FAKE_GPU_DEVICES", 2);
  if (device_count < 0 || device_count > 64) device_count = 2;
  pools = env_int("KVC_FAKE_GPU_POOLS", 1);
  driver = env_int("KVC_FAKE_GPU_DRIVER", CUDART_VERSION);
  no_image = env_int("KVC_FAKE_GPU_NO_IMAGE", 0);
}

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

/* What every call that needs a context does first: the runtime starts, the current device's context exists. */
cudaError_t ready() {
  init();
  if (driver < CUDART_VERSION) return cudaErrorInsufficientDriver;
  if (device_count == 0) return cudaErrorNoDevice;
  const int d = current < 0 ? 0 : current;
  if (!contexts[d]) contexts[d] = 1;
  return cudaSuccess;
}

int device_now() { return current < 0 ? 0 : current; }

/* The allocation holding [p, p + bytes), or NULL. */
const allocation* find(const void* p, size_t bytes, uintptr_t* base = nullptr) {
  auto it = allocations.upper_bound((uintptr_t)p);
  if (it == allocations.begin()) return nullptr;
  --it;
  if ((uintptr_t)p + bytes > it->first + it->second.bytes) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

/* Captures that forbid `unsafe` calls on this thread (CUDA's global and thread-local modes). */
bool capture_forbids() {
  if (thread_mode == cudaStreamCaptureModeRelaxed) return false;
  for (capture_state* c : captures)
    if (!c->invalid && c->mode != cudaStreamCaptureModeRelaxed) return true;
  return false;
}

/* A rule of stream capture broken: said loudly, the captures invalidated, CUDA's error returned. */
cudaError_t violation(const char* call, const char* why) {
  fprintf(stderr,
          "kvc fake gpu: CAPTURE VIOLATION: %s %s while a stream is being captured into a graph; CUDA fails it with "
          "cudaErrorStreamCaptureUnsupported and invalidates the capture\n",
          call, why);
  fflush(stderr);
  violations++;
  for (capture_state* c : captures) c->invalid = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}

cudaError_t unsafe_call(const char* call) {
  cudaError_t e = ready();
  if (e) return fail(e);
  if (capture_forbids()) return violation(call, "(a potentially unsafe call: it may allocate or synchronise)");
  return cudaSuccess;
}

/* Runs `op` on `s` now, or records it when `s` is being captured. */
cudaError_t issue(cudaStream_t s, std::function<void()> op) {
  cudaError_t e = ready();
  if (e) return fail(e);
  if (s && s->device != device_now()) {
    fprintf(stderr, "kvc fake gpu: work issued on a stream of device %d while device %d is current\n", s->device,
            device_now());
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (s && s->capture) {
    if (s->capture->invalid) return fail(cudaErrorStreamCaptureInvalidated);
    s->capture->body->ops.push_back(std::move(op));
    s->ops++;
    return cudaSuccess;
  }
  op();
  return cudaSuccess;
}

bool is_host_pageable(const void* p, size_t bytes) { return bytes && !find(p, bytes); }

/* A copy that reads or writes pageable host memory cannot be part of a graph (it would run at every replay). */
cudaError_t check_copy(const char* call, cudaStream_t s, void* dst, const void* src, size_t bytes) {
  if (!(s && s->capture)) return cudaSuccess;
  if (is_host_pageable(src, bytes)) return violation(call, "reads pageable host memory");
  if (is_host_pageable(dst, bytes)) return violation(call, "writes pageable host memory");
  return cudaSuccess;
}

cudaError_t alloc(void** p, size_t bytes, mem_kind kind) {
  if (!p) return fail(cudaErrorInvalidValue);
  void* q = nullptr;
  if (posix_memalign(&q, 256, bytes ? bytes : 1)) return fail(cudaErrorMemoryAllocation);
  allocations[(uintptr_t)q] = allocation{bytes ? bytes : 1, kind, device_now(), nullptr};
  *p = q;
  return cudaSuccess;
}

cudaError_t release(void* p, mem_kind kind, const char* call) {
  if (!p) return cudaSuccess;
  auto it = allocations.find((uintptr_t)p);
  if (it == allocations.end() || it->second.kind != kind) {
    fprintf(stderr, "kvc fake gpu: %s(%p): not a live %s allocation\n", call, p,
            kind == MEM_DEVICE ? "device" : "pinned host");
    return fail(cudaErrorInvalidValue);
  }
  allocations.erase(it);
  free(p);
  return cudaSuccess;
}

int fake_primary_ctx_state(int dev, unsigned int* flags, int* active) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  init();
  if (dev < 0 || dev >= device_count) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  if (flags) *flags = 0;
  if (active) *active = contexts[dev] != 0;
  return 0;
}

}  // namespace

namespace kvc_fake {

cudaError_t launch(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> thread) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu || !block.x ||
      !block.y || !block.z || (uint64_t)block.x * block.y * block.z > 1024)
    return fail(cudaErrorInvalidConfiguration);
  if (no_image) return fail(cudaErrorNoKernelImageForDevice);
  launches++;
  return issue(stream, [grid, block, thread]() { run_grid(grid, block, thread); });
}

}  // namespace kvc_fake

#define LOCK std::lock_guard<std::recursive_mutex> lock_(mu)

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  LOCK;
  init();
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 0;
  if (driver < CUDART_VERSION) return fail(cudaErrorInsufficientDriver);
  if (device_count == 0) return fail(cudaErrorNoDevice);
  *count = device_count;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  LOCK;
  init();
  if (!device) return fail(cudaErrorInvalidValue);
  *device = device_now(); /* creates nothing, as in CUDA */
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  LOCK;
  init();
  if (device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  current = device;
  return fail(ready()); /* CUDA 12 and later: the device's primary context is made current, so it exists */
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  LOCK;
  init();
  if (!value || device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMemoryPoolsSupported) return fail(cudaErrorInvalidValue);
  *value = pools;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  LOCK;
  init();
  if (!prop || device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "kvcache fake GPU %d", device);
  prop->totalGlobalMem = (size_t)16 << 30;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 2;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  LOCK;
  init();
  if (!version) return fail(cudaErrorInvalidValue);
  *version = driver;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  LOCK;
  cudaError_t e = ready();
  if (e) return fail(e);
  if (!attr || !func) return fail(cudaErrorInvalidDeviceFunction);
  if (no_image) return fail(cudaErrorNoKernelImageForDevice);
  memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int cuda_version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  (void)flags;
  if (!symbol || !fn) return fail(cudaErrorInvalidValue);
  *fn = nullptr;
  cudaDriverEntryPointQueryResult r = cudaDriverEntryPointSymbolNotFound;
  if (strcmp(symbol, "cuDevicePrimaryCtxGetState") == 0) {
    r = cuda_version <= (unsigned)CUDART_VERSION ? cudaDriverEntryPointSuccess : cudaDriverEntryPointVersionNotSufficent;
    if (r == cudaDriverEntryPointSuccess) *fn = (void*)&fake_primary_ctx_state;
  }
  if (status) *status = r;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define NAME(x) \
  case x:       \
    return #x;
    NAME(cudaSuccess)
    NAME(cudaErrorInvalidValue)
    NAME(cudaErrorMemoryAllocation)
    NAME(cudaErrorInvalidConfiguration)
    NAME(cudaErrorInsufficientDriver)
    NAME(cudaErrorInvalidDeviceFunction)
    NAME(cudaErrorNoDevice)
    NAME(cudaErrorInvalidDevice)
    NAME(cudaErrorNoKernelImageForDevice)
    NAME(cudaErrorInvalidResourceHandle)
    NAME(cudaErrorIllegalState)
    NAME(cudaErrorNotReady)
    NAME(cudaErrorNotSupported)
    NAME(cudaErrorStreamCaptureUnsupported)
    NAME(cudaErrorStreamCaptureInvalidated)
    NAME(cudaErrorStreamCaptureUnjoined)
    NAME(cudaErrorStreamCaptureWrongThread)
#undef NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined: return "capture sequence contains a fork that was not joined to the primary stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unknown error";
}

cudaError_t cudaDeviceSynchronize(void) {
  LOCK;
  return unsafe_call("cudaDeviceSynchronize");
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  LOCK;
  cudaError_t e = unsafe_call("cudaMalloc");
  return e ? e : alloc(p, bytes, MEM_DEVICE);
}

cudaError_t cudaFree(void* p) {
  LOCK;
  cudaError_t e = unsafe_call("cudaFree");
  return e ? e : release(p, MEM_DEVICE, "cudaFree");
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  LOCK;
  cudaError_t e = issue(s, [] {});
  if (e) return e;
  if (!pools) return fail(cudaErrorInvalidValue);
  if ((e = alloc(p, bytes, MEM_DEVICE))) return e;
  if (s && s->capture) { /* a graph's memory lives as long as the graph */
    s->capture->body->owned.push_back(*p);
    allocations[(uintptr_t)*p].graph = s->capture->body.get();
  }
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  LOCK;
  if (!p) return cudaSuccess;
  if (!(s && s->capture)) {
    cudaError_t e = issue(s, [] {});
    return e ? e : release(p, MEM_DEVICE, "cudaFreeAsync");
  }
  uintptr_t base = 0;
  const allocation* a = find(p, 1, &base);
  if (!a || base != (uintptr_t)p || a->kind != MEM_DEVICE)
    return release(p, MEM_DEVICE, "cudaFreeAsync"); /* says what is wrong */
  if (a->graph == s->capture->body.get()) return issue(s, [] {}); /* the graph's own: released with it */
  /* Memory from before the capture: the graph frees it when it runs, once; a second replay would free it again. */
  return issue(s, [p] {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!allocations.count((uintptr_t)p)) {
      violations++;
      fprintf(stderr, "kvc fake gpu: CAPTURE VIOLATION: a graph replay frees %p, memory allocated before the capture "
                      "and freed already (by an earlier replay)\n", p);
      return;
    }
    release(p, MEM_DEVICE, "cudaFreeAsync (graph replay)");
  });
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  LOCK;
  init();
  if (!pool || device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  if (!pools) return fail(cudaErrorNotSupported);
  *pool = &mem_pools[device];
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  LOCK;
  if (!pool || !value || attr != cudaMemPoolAttrReleaseThreshold) return fail(cudaErrorInvalidValue);
  memcpy(value, &pool->release_threshold, sizeof pool->release_threshold);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  LOCK;
  if (!pool || !value || attr != cudaMemPoolAttrReleaseThreshold) return fail(cudaErrorInvalidValue);
  memcpy(&pool->release_threshold, value, sizeof pool->release_threshold);
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  LOCK;
  (void)keep;
  return pool ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  LOCK;
  (void)flags;
  cudaError_t e = unsafe_call("cudaHostAlloc");
  return e ? e : alloc(p, bytes, MEM_PINNED);
}

cudaError_t cudaFreeHost(void* p) {
  LOCK;
  cudaError_t e = unsafe_call("cudaFreeHost"); /* it waits for the device */
  return e ? e : release(p, MEM_PINNED, "cudaFreeHost");
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  LOCK;
  if (bytes && !find(p, bytes)) {
    fprintf(stderr, "kvc fake gpu: cudaMemsetAsync(%p, %zu bytes): not inside one device or pinned allocation\n", p,
            bytes);
    return fail(cudaErrorInvalidValue);
  }
  return issue(s, [p, value, bytes] { memset(p, value, bytes); });
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  LOCK;
  cudaError_t e = unsafe_call("cudaMemset");
  return e ? e : cudaMemsetAsync(p, value, bytes, nullptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  LOCK;
  (void)kind;
  if (!bytes) return cudaSuccess;
  cudaError_t e = check_copy("cudaMemcpyAsync", s, dst, src, bytes);
  return e ? e : issue(s, [dst, src, bytes] { memmove(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  LOCK;
  cudaError_t e = unsafe_call("cudaMemcpy");
  return e ? e : cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
  LOCK;
  (void)kind;
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  if (!width || !height) return cudaSuccess;
  const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  cudaError_t e = check_copy("cudaMemcpy2DAsync", s, dst, src, dspan < sspan ? dspan : sspan);
  if (e) return e;
  return issue(s, [=] {
    for (size_t r = 0; r < height; r++) memmove((char*)dst + r * dpitch, (const char*)src + r * spitch, width);
  });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  LOCK;
  (void)flags;
  cudaError_t e = ready();
  if (e) return fail(e);
  if (!s) return fail(cudaErrorInvalidValue);
  *s = new kvc_fake_stream();
  (*s)->device = device_now();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  LOCK;
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (s->capture) return fail(cudaErrorStreamCaptureUnsupported);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  LOCK;
  cudaError_t e = ready();
  if (e) return fail(e);
  if ((s && s->capture) || capture_forbids()) return violation("cudaStreamSynchronize", "waits for a stream");
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  LOCK;
  (void)flags;
  cudaError_t e = ready();
  if (e) return fail(e);
  if (!ev) return fail(cudaErrorInvalidValue);
  *ev = new kvc_fake_event();
  (*ev)->device = device_now();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  LOCK;
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  delete ev;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  LOCK;
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (s && ev->device != s->device) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t e = issue(s, [] {});
  if (e) return e;
  ev->captured = s ? s->capture : nullptr;
  ev->stream = s;
  ev->stream_ops = s ? s->ops : 0;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  LOCK;
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (ev->captured) return violation("cudaEventQuery", "queries an event recorded inside the capture");
  if (capture_forbids()) return violation("cudaEventQuery", "queries an event");
  return cudaSuccess; /* work runs as it is issued: every recorded event has passed */
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  LOCK;
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (ev->captured || capture_forbids()) return violation("cudaEventSynchronize", "waits for an event");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  LOCK;
  (void)flags;
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t e = ready();
  if (e) return fail(e);
  capture_state* c = ev->captured;
  if (c && s && !s->capture) { /* the stream joins the capture (a fork) */
    s->capture = c;
    s->ops = s->joined = 0;
    c->members.push_back(s);
  }
  if (c && ev->stream && ev->stream->joined < ev->stream_ops) ev->stream->joined = ev->stream_ops;
  return issue(s, [] {});
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  LOCK;
  cudaError_t e = ready();
  if (e) return fail(e);
  if (!s) return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot be captured */
  if (s->capture) return fail(cudaErrorIllegalState);
  capture_state* c = new capture_state();
  c->origin = s;
  c->mode = mode;
  c->members.push_back(s);
  s->capture = c;
  s->ops = s->joined = 0;
  captures.push_back(c);
  return cudaSuccess;
}

/* The capture ends for every stream that took part: they record nothing more. */
static void leave_capture(capture_state* c) {
  for (kvc_fake_stream* m : c->members) m->capture = nullptr;
  for (size_t i = 0; i < captures.size(); i++)
    if (captures[i] == c) captures.erase(captures.begin() + (long)i);
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  LOCK;
  if (!graph) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  if (!s || !s->capture || s->capture->origin != s) return fail(cudaErrorIllegalState);
  capture_state* c = s->capture;
  cudaError_t e = cudaSuccess;
  if (c->invalid) e = cudaErrorStreamCaptureInvalidated;
  for (kvc_fake_stream* m : c->members)
    if (!e && m != s && m->joined < m->ops) {
      fprintf(stderr, "kvc fake gpu: cudaStreamEndCapture: a stream forked into the capture has %zu operations the "
                      "origin stream never waited for\n", m->ops - m->joined);
      e = cudaErrorStreamCaptureUnjoined;
    }
  leave_capture(c);
  if (!e) *graph = new kvc_fake_graph{c->body};
  delete c;
  return fail(e);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  LOCK;
  if (!status) return fail(cudaErrorInvalidValue);
  *status = !s || !s->capture ? cudaStreamCaptureStatusNone
            : s->capture->invalid ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return fail(cudaErrorInvalidValue);
  cudaStreamCaptureMode old = thread_mode;
  thread_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  LOCK;
  (void)flags;
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  *exec = new kvc_fake_graph_exec{graph->body};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  LOCK;
  if (!exec) return fail(cudaErrorInvalidValue);
  std::shared_ptr<graph_body> body = exec->body;
  return issue(s, [body] {
    for (const std::function<void()>& op : body->ops) op();
  });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  LOCK;
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  LOCK;
  delete graph;
  return cudaSuccess;
}

int kvc_fake_contexts(int device) {
  LOCK;
  init();
  return device >= 0 && device < device_count ? contexts[device] : 0;
}

long kvc_fake_capture_violations(void) {
  LOCK;
  return violations;
}

long kvc_fake_launches(void) {
  LOCK;
  return launches;
}

}  // extern "C"
