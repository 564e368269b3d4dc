/* tests/gpu/fake_runtime/fake_internal.h: what fake_runtime.cpp asks of fake_grid.cpp. */
#ifndef KVC_FAKE_INTERNAL_H
#define KVC_FAKE_INTERNAL_H

#include <functional>

#include "fake_cuda_runtime.h"

namespace kvc_fake {
/* Runs `thread` for every thread of every block of the grid on this thread, now. */
void run_grid(dim3 grid, dim3 block, const std::function<void()>& thread);
} /* namespace kvc_fake */

#endif /* KVC_FAKE_INTERNAL_H */
