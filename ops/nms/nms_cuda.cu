// NMS on the device, with one host synchronisation (the kept count) at the end.
//
// 1. Sort: keys from the scores (nms_iou.h: NaN first, -0 == +0), stable CUB
//    radix sort of (key, index) pairs; gather the boxes in that order, upcast,
//    with their areas.
// 2. Row blocks of 64 boxes are processed in chunks (the mask of a chunk holds
//    at most kMaskBytes). For each chunk:
//    - mask kernel: bit k of mask[i][jb] is set when box i suppresses box
//      jb*64 + k (j > i, upper triangle only). Rows already removed by earlier
//      chunks are skipped (a fully removed row block exits at once), and
//      columns already removed are not tested.
//    - scan kernel (one block): for each row block in order, greedy within the
//      block from its diagonal word (one step per kept box), append the kept
//      indices, then OR the kept rows' words into the removed bits of every
//      later block. No host round trip per box or per block.
// Everything stays on the current stream; the workspace comes from the caller.
#include <cub/device/device_radix_sort.cuh>

#include "nms/nms.h"
#include "nms/nms_iou.h"
#include "common/cuda_common.cuh"

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace nms_cu {

constexpr int kBlock = 64;                                // boxes per mask word
constexpr std::size_t kMaskBytes = std::size_t{64} << 20;  // mask memory per chunk
constexpr int kScanThreads = 1024;
constexpr int kSetupThreads = 256;

template <typename Acc>
struct alignas(4 * sizeof(Acc)) Box {
  Acc x1, y1, x2, y2;
};

template <typename T>
using AccOf = typename cuda::Convert<T>::Acc;
template <typename Acc>
using KeyOf = decltype(nms_detail::score_key(Acc{}));

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::size_t align_up(std::size_t v) { return (v + 255) / 256 * 256; }

// Rows per mask chunk: a multiple of 64, at least 64, at most the padded n
// and at most 65535 row blocks (the grid's y limit).
std::int64_t chunk_rows(std::int64_t n) {
  const std::int64_t words = ceil_div(n, kBlock);
  std::int64_t rows = static_cast<std::int64_t>(kMaskBytes / (static_cast<std::size_t>(words) * 8)) / kBlock * kBlock;
  rows = std::max<std::int64_t>(rows, kBlock);
  rows = std::min<std::int64_t>(rows, words * kBlock);
  return std::min<std::int64_t>(rows, std::int64_t{65535} * kBlock);
}

struct Layout {
  std::size_t keys_in, keys_out, idx_in, idx_out, sort_temp, boxes, areas, removed, mask, count, total;
  std::size_t sort_temp_bytes;
};

template <typename Key, typename Acc>
CudaStatus make_layout(std::int64_t n, Layout& l) {
  const auto un = static_cast<std::size_t>(n);
  std::size_t temp = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const Key*>(nullptr),
                                                          static_cast<Key*>(nullptr), static_cast<const int*>(nullptr),
                                                          static_cast<int*>(nullptr), static_cast<int>(n));
  if (err != cudaSuccess) return static_cast<CudaStatus>(err);
  const std::size_t words = static_cast<std::size_t>(ceil_div(n, kBlock));
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  l.keys_in = take(un * sizeof(Key));
  l.keys_out = take(un * sizeof(Key));
  l.idx_in = take(un * sizeof(int));
  l.idx_out = take(un * sizeof(int));
  l.sort_temp = take(temp);
  l.sort_temp_bytes = temp;
  l.boxes = take(un * sizeof(Box<Acc>));
  l.areas = take(un * sizeof(Acc));
  l.removed = take(words * 8);
  l.mask = take(static_cast<std::size_t>(chunk_rows(n)) * words * 8);
  l.count = take(sizeof(unsigned long long));
  l.total = at;
  return 0;
}

template <typename T>
__global__ void nms_make_keys(const T* __restrict__ scores, KeyOf<AccOf<T>>* __restrict__ keys, int* __restrict__ idx,
                              int n) {
  using C = cuda::Convert<T>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    keys[i] = nms_detail::score_key(C::load(scores[i]));
    idx[i] = static_cast<int>(i);
  }
}

// Boxes in visiting order, upcast, with areas; removed bits cleared except the
// padding past n in the last word; the kept count zeroed.
template <typename T>
__global__ void nms_gather(const T* __restrict__ boxes, const int* __restrict__ order, Box<AccOf<T>>* __restrict__ out,
                           AccOf<T>* __restrict__ areas, unsigned long long* __restrict__ removed,
                           unsigned long long* __restrict__ count, int n, int words) {
  using C = cuda::Convert<T>;
  using Acc = AccOf<T>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < n; r += stride) {
    const T* b = boxes + static_cast<std::int64_t>(order[r]) * 4;
    const Box<Acc> box{C::load(b[0]), C::load(b[1]), C::load(b[2]), C::load(b[3])};
    out[r] = box;
    areas[r] = nms_detail::box_area(box.x1, box.y1, box.x2, box.y2);
    if (r < words) {
      const int tail = n % kBlock;
      removed[r] = (r == words - 1 && tail != 0) ? ~((1ull << tail) - 1ull) : 0ull;
    }
    if (r == 0) *count = 0;
  }
}

// grid (words - rb0, rows of this chunk / 64), 64 threads: thread t owns row
// i = ib*64 + t, the block owns column block jb.
template <typename Acc>
__global__ void __launch_bounds__(kBlock)
    nms_mask(const Box<Acc>* __restrict__ boxes, const Acc* __restrict__ areas,
             const unsigned long long* __restrict__ removed, unsigned long long* __restrict__ mask, int n, int words,
             int rb0, double threshold) {
  const int ib = rb0 + static_cast<int>(blockIdx.y);
  const int jb = rb0 + static_cast<int>(blockIdx.x);
  if (jb < ib) return;
  const unsigned long long row_removed = removed[ib];
  if (row_removed == ~0ull) return;  // every row of this block is suppressed already
  const unsigned long long col_removed = removed[jb];

  __shared__ Box<Acc> col_box[kBlock];
  __shared__ Acc col_area[kBlock];
  const int t = threadIdx.x;
  const int j0 = jb * kBlock;
  if (j0 + t < n) {
    col_box[t] = boxes[j0 + t];
    col_area[t] = areas[j0 + t];
  }
  __syncthreads();

  const int i = ib * kBlock + t;
  if (i >= n || ((row_removed >> t) & 1ull)) return;  // never read by the scan
  const Box<Acc> bi = boxes[i];
  const Acc ai = areas[i];
  const int k_begin = jb == ib ? t + 1 : 0;
  const int k_end = min(kBlock, n - j0);
  unsigned long long word = 0;
  if (col_removed != ~0ull) {
    for (int k = k_begin; k < k_end; ++k) {
      if ((col_removed >> k) & 1ull) continue;  // removed already: its bit changes nothing
      const Box<Acc>& bj = col_box[k];
      if (nms_detail::iou_above(bi.x1, bi.y1, bi.x2, bi.y2, ai, bj.x1, bj.y1, bj.x2, bj.y2, col_area[k], threshold)) {
        word |= 1ull << k;
      }
    }
  }
  const std::int64_t local_row = static_cast<std::int64_t>(i) - static_cast<std::int64_t>(rb0) * kBlock;
  mask[local_row * words + jb] = word;
}

// One block: the greedy pass over row blocks [rb0, rb1).
__global__ void __launch_bounds__(kScanThreads)
    nms_scan(const unsigned long long* __restrict__ mask, unsigned long long* removed,
             const int* __restrict__ order, std::int64_t* __restrict__ keep, unsigned long long* __restrict__ count,
             int words, int rb0, int rb1) {
  __shared__ unsigned long long diag[kBlock];
  __shared__ unsigned long long s_kept;
  __shared__ unsigned long long s_base;
  const int t = threadIdx.x;
  unsigned long long kept_so_far = t == 0 ? *count : 0ull;  // meaningful in thread 0 only
  // Diagonal word of row t of the current block, loaded one round ahead; words
  // of rows removed before the mask kernel ran are garbage and masked below.
  unsigned long long next_diag = t < kBlock ? mask[static_cast<std::int64_t>(t) * words + rb0] : 0ull;
  for (int ib = rb0; ib < rb1; ++ib) {
    const std::int64_t row0 = static_cast<std::int64_t>(ib - rb0) * kBlock;  // local row of box ib*64
    const unsigned long long row_removed = removed[ib];
    if (t < kBlock) diag[t] = ((row_removed >> t) & 1ull) ? 0ull : next_diag;
    __syncthreads();
    if (t == 0) {
      // Lowest remaining bit = highest remaining score: keep it, drop what it suppresses.
      unsigned long long remaining = ~row_removed;
      unsigned long long kept = 0;
      while (remaining != 0ull) {
        const int k = __ffsll(static_cast<long long>(remaining)) - 1;
        kept |= 1ull << k;
        remaining &= ~diag[k];
        remaining &= remaining - 1ull;  // bit k itself
      }
      s_kept = kept;
      s_base = kept_so_far;
      kept_so_far += static_cast<unsigned long long>(__popcll(kept));
    }
    __syncthreads();
    const unsigned long long kept = s_kept;
    if (t < kBlock) {
      if ((kept >> t) & 1ull) {
        const unsigned long long below = kept & ((1ull << t) - 1ull);
        keep[s_base + static_cast<unsigned long long>(__popcll(below))] = order[ib * kBlock + t];
      }
      if (ib + 1 < rb1) next_diag = mask[(row0 + kBlock + t) * words + ib + 1];
    }
    // The kept rows' words suppress boxes of later blocks. Up to 16 loads in
    // flight per thread; groups of 16 rows with nothing kept are skipped.
    for (int jb = ib + 1 + t; jb < words; jb += blockDim.x) {
      unsigned long long w = 0;
      for (int k0 = 0; k0 < kBlock; k0 += 16) {
        const unsigned group = static_cast<unsigned>((kept >> k0) & 0xffffull);
        if (group == 0u) continue;
        unsigned long long v[16];
#pragma unroll
        for (int u = 0; u < 16; ++u) v[u] = ((group >> u) & 1u) ? mask[(row0 + k0 + u) * words + jb] : 0ull;
#pragma unroll
        for (int u = 0; u < 16; ++u) w |= v[u];
      }
      if (w != 0ull) removed[jb] |= w;
    }
    __syncthreads();  // removed[ib + 1] and diag/s_kept are read again next round
  }
  if (t == 0) *count = kept_so_far;
}

template <typename T>
CudaStatus run_nms(const T* boxes, const T* scores, std::int64_t n, double threshold, char* ws,
                   std::size_t ws_bytes, std::int64_t* keep, std::int64_t* count, cudaStream_t stream) {
  using Acc = AccOf<T>;
  using Key = KeyOf<Acc>;
  Layout l{};
  CudaStatus status = make_layout<Key, Acc>(n, l);
  if (status != 0) return status;
  if (ws_bytes < l.total) return static_cast<CudaStatus>(cudaErrorInvalidValue);
  auto* keys_in = reinterpret_cast<Key*>(ws + l.keys_in);
  auto* keys_out = reinterpret_cast<Key*>(ws + l.keys_out);
  auto* idx_in = reinterpret_cast<int*>(ws + l.idx_in);
  auto* idx_out = reinterpret_cast<int*>(ws + l.idx_out);
  auto* sorted = reinterpret_cast<Box<Acc>*>(ws + l.boxes);
  auto* areas = reinterpret_cast<Acc*>(ws + l.areas);
  auto* removed = reinterpret_cast<unsigned long long*>(ws + l.removed);
  auto* mask = reinterpret_cast<unsigned long long*>(ws + l.mask);
  auto* d_count = reinterpret_cast<unsigned long long*>(ws + l.count);

  const int nn = static_cast<int>(n);
  const int words = static_cast<int>(ceil_div(n, kBlock));
  const int setup_blocks = static_cast<int>(std::min<std::int64_t>(ceil_div(n, kSetupThreads), 65535));

  nms_make_keys<T><<<setup_blocks, kSetupThreads, 0, stream>>>(scores, keys_in, idx_in, nn);
  if ((status = cuda::last_launch_status()) != 0) return status;
  std::size_t temp = l.sort_temp_bytes;
  status = static_cast<CudaStatus>(cub::DeviceRadixSort::SortPairs(ws + l.sort_temp, temp, keys_in, keys_out, idx_in,
                                                                   idx_out, nn, 0, static_cast<int>(sizeof(Key) * 8),
                                                                   stream));
  if (status != 0) return status;
  nms_gather<T><<<setup_blocks, kSetupThreads, 0, stream>>>(boxes, idx_out, sorted, areas, removed, d_count, nn, words);
  if ((status = cuda::last_launch_status()) != 0) return status;

  const int chunk_blocks = static_cast<int>(chunk_rows(n) / kBlock);
  for (int rb0 = 0; rb0 < words; rb0 += chunk_blocks) {
    const int rb1 = std::min(words, rb0 + chunk_blocks);
    const dim3 grid(static_cast<unsigned>(words - rb0), static_cast<unsigned>(rb1 - rb0));
    nms_mask<Acc><<<grid, kBlock, 0, stream>>>(sorted, areas, removed, mask, nn, words, rb0, threshold);
    if ((status = cuda::last_launch_status()) != 0) return status;
    nms_scan<<<1, kScanThreads, 0, stream>>>(mask, removed, idx_out, keep, d_count, words, rb0, rb1);
    if ((status = cuda::last_launch_status()) != 0) return status;
  }

  unsigned long long host_count = 0;
  status = static_cast<CudaStatus>(
      cudaMemcpyAsync(&host_count, d_count, sizeof host_count, cudaMemcpyDeviceToHost, stream));
  if (status != 0) return status;
  status = static_cast<CudaStatus>(cudaStreamSynchronize(stream));
  if (status != 0) return status;
  *count = static_cast<std::int64_t>(host_count);
  return 0;
}

}  // namespace nms_cu
using namespace nms_cu;
std::size_t nms_cuda_workspace_bytes(ScalarKind kind, std::int64_t n) {
  if (n <= 0) return 0;
  std::size_t bytes = 0;
  cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    Layout l{};
    const CudaStatus status = make_layout<KeyOf<AccOf<T>>, AccOf<T>>(n, l);
    bytes = status == 0 ? l.total : 0;
    return status;
  });
  return bytes;
}

CudaStatus nms_cuda(ScalarKind kind, const void* boxes, const void* scores, std::int64_t n, double iou_threshold,
                    void* workspace, std::size_t workspace_bytes, std::int64_t* keep, std::int64_t* count,
                    CudaStream stream) {
  *count = 0;
  if (n <= 0) return 0;
  if (n >= 0x7fffffff) return static_cast<CudaStatus>(cudaErrorInvalidValue);
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    return run_nms<T>(static_cast<const T*>(boxes), static_cast<const T*>(scores), n, iou_threshold,
                      static_cast<char*>(workspace), workspace_bytes, keep, count, stream);
  });
}

}  // namespace opkiln::kernels
