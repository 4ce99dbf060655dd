/* cuda_linear.cu - the CUDA kernels of the backend's linear op, bit-identical to the
 * scalar reference kernels/cpu/linear_scalar.c (read the two side by side).
 *
 * Exactness arguments (why the GPU may sum in a different order where it does):
 *  - QUANT FP8: q and w are e4m3 values (multiples of 2^-9, |.| <= 448), so every
 *    product is a multiple of 2^-18 below 2^18 and any partial sum of a 128-block is a
 *    multiple of 2^-18 below 2^25: 43 significant bits, exact in double.  The block sum
 *    is therefore the same in any order; lanes each sum 16 products and the 8 lanes
 *    of a block are combined with shuffles.  NaN codes make the sum NaN in any order.
 *  - QUANT FP4: e2m1 values are multiples of 2^-1 (|.| <= 6): products multiples of
 *    2^-10 below 2^12, a 32-block sum below 2^17: exact as well; one lane per block.
 *  - The per-block terms t = f32(f32(f32(part) * s) * s_w) do not depend on each other;
 *    only acc = f32(acc + t) is order-sensitive, and it is done block by block in
 *    ascending order by every lane of the row's warp (values broadcast by shuffles).
 *  - EXACT: one thread per output row walks the columns in ascending order with one
 *    double accumulator; fma(x, w, acc) equals acc + x*w of the reference because the
 *    product of two floats is exact in double.
 * Explicit __fmul_rn/__fadd_rn/__fdiv_rn keep nvcc from contracting the f32 steps into
 * FMAs, and the build passes --fmad=false and no fast-math (IEEE division, denormals).
 *
 * Weight decodes without tables: an e4m3 byte's 7 magnitude bits shifted into a
 * double's exponent/mantissa give 2^(E-1023)(1+m/8) (or the subnormal m/8*2^-1022),
 * and one exact multiplication by 2^1016 rebias it to the e4m3 value, subnormals
 * included; e2m1 likewise with 2^1022.  NaN codes are patched in.
 *
 * Thread mapping: QUANT kernels give each warp R = 4 consecutive rows (a row group
 * never straddles a 128-row scale block) and loop over the columns in 16-byte pieces
 * per lane; EXACT kernels give each warp 32 rows and stage 32 x 64 weight tiles
 * (decoded to double) and the x tile in shared memory, loaded in storage order (so
 * both the row-major and the R8 layout load coalesced).  Batches of vectors are done
 * NB at a time (1, 4 or 8 accumulators per thread).
 *
 * Ownership: kernels only read weights/x and write y; no allocation here.
 * Thread: host launchers from the backend's driving thread.
 */
#include <math.h>
#include <stdint.h>

#include "cu_launch.h"
#include "cuda_linear.h"
#include "cuda_num.cuh"

namespace {

constexpr int QR = 4;           /* rows per warp in the QUANT kernels */
constexpr int QWARPS = 4;       /* warps per block in the QUANT kernels */
constexpr int XTJ = 64;         /* columns per tile in the EXACT kernel */

__device__ __forceinline__ double e4m3_f64(uint32_t b)
{
    double d = __hiloint2double((int)(((b & 0x7fu) << 17) | ((b & 0x80u) << 24)), 0);
    d = __dmul_rn(d, 0x1p1016);
    return (b & 0x7fu) == 0x7fu ? __longlong_as_double(0x7ff8000000000000ll) : d;
}

__device__ __forceinline__ double e2m1_f64(uint32_t c)
{
    return __dmul_rn(__hiloint2double((int)(((c & 7u) << 19) | ((c & 8u) << 28)), 0), 0x1p1022);
}

/* One block (128 threads) per (128-column block, vector). */
__global__ void k_act_quant(const float *x, int K, int nkb, double *xq, float *xs)
{
    __shared__ float red[4];
    const int kb = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const size_t j = (size_t)b * K + (size_t)kb * 128 + t;
    float s;
    xq[j] = (double)v4d_act_quant128(x[j], red, &s);
    if (t == 0)
        xs[(size_t)b * nkb + kb] = s;
}

__device__ __forceinline__ void load16(const uint8_t *p, bool vec, uint32_t out[4])
{
    if (vec) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else {
        for (int i = 0; i < 4; i++)
            out[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
                     ((uint32_t)p[4 * i + 3] << 24);
    }
}

/* The rows [r0, r0+QR) of one FP8 product for nb <= NB vectors, by the calling warp
 * (the arithmetic of k_quant_fp8 and of its grouped variant k_quant_grouped). */
template <int NB>
__device__ __forceinline__ void quant_fp8_rows(const uint8_t *__restrict__ w, const uint8_t *__restrict__ scale,
                                               int rows, int K, int nb, const double *__restrict__ xq,
                                               const float *__restrict__ xs, int nkb_all, float *__restrict__ y,
                                               int ldy, bool vec, int r0)
{
    const int lane = threadIdx.x & 31;
    if (r0 >= rows)
        return;
    const int nkb = K / 128, scols = (K + 127) / 128, grp = lane >> 3, sub = lane & 7;
    float acc[QR][NB];
    for (int r = 0; r < QR; r++)
        for (int b = 0; b < NB; b++)
            acc[r][b] = 0.0f;
    const uint8_t *sc = scale + (size_t)(r0 / 128) * scols;
    for (int kb0 = 0; kb0 < nkb; kb0 += 4) {
        const int kb = kb0 + grp;
        double part[QR][NB];
        for (int r = 0; r < QR; r++)
            for (int b = 0; b < NB; b++)
                part[r][b] = 0.0;
        if (kb < nkb) {
            const int c = kb * 128 + sub * 16;
            uint32_t wv[QR][4];
            for (int r = 0; r < QR; r++) {
                if (r0 + r < rows)
                    load16(w + (size_t)(r0 + r) * K + c, vec, wv[r]);
                else
                    wv[r][0] = wv[r][1] = wv[r][2] = wv[r][3] = 0u;
            }
#pragma unroll
            for (int e = 0; e < 16; e++) {
                double wd[QR];
                for (int r = 0; r < QR; r++)
                    wd[r] = e4m3_f64((wv[r][e >> 2] >> (8 * (e & 3))) & 0xffu);
                for (int b = 0; b < NB; b++) {
                    if (b < nb) {
                        const double q = xq[(size_t)b * K + c + e];
                        for (int r = 0; r < QR; r++)
                            part[r][b] = fma(q, wd[r], part[r][b]);
                    }
                }
            }
        }
        float t[QR][NB];
        const float sw = kb < nkb ? v4d_e8m0(sc[kb]) : 0.0f;
        for (int r = 0; r < QR; r++)
            for (int b = 0; b < NB; b++) {
                double p = part[r][b];
                p += __shfl_xor_sync(0xffffffffu, p, 4);
                p += __shfl_xor_sync(0xffffffffu, p, 2);
                p += __shfl_xor_sync(0xffffffffu, p, 1);
                t[r][b] = (kb < nkb && b < nb)
                              ? __fmul_rn(__fmul_rn(__double2float_rn(p), xs[(size_t)b * nkb_all + kb]), sw)
                              : 0.0f;
            }
        for (int g = 0; g < 4; g++) {
            if (kb0 + g >= nkb)
                break;
            for (int r = 0; r < QR; r++)
                for (int b = 0; b < NB; b++)
                    acc[r][b] = __fadd_rn(acc[r][b], __shfl_sync(0xffffffffu, t[r][b], g * 8));
        }
    }
    if (lane == 0)
        for (int r = 0; r < QR; r++)
            for (int b = 0; b < NB; b++)
                if (b < nb && r0 + r < rows)
                    y[(size_t)b * ldy + r0 + r] = v4d_bf16(acc[r][b]);
}

/* The same for FP4 (the arithmetic of k_quant_fp4 and of k_quant_grouped). */
template <int NB>
__device__ __forceinline__ void quant_fp4_rows(const uint8_t *__restrict__ w, const uint8_t *__restrict__ scale,
                                               int rows, int K, int nb, const double *__restrict__ xq,
                                               const float *__restrict__ xs, int nkb_all, float *__restrict__ y,
                                               int ldy, bool vec, int r0)
{
    const int lane = threadIdx.x & 31;
    if (r0 >= rows)
        return;
    const int nsb = K / 32;
    float acc[QR][NB];
    for (int r = 0; r < QR; r++)
        for (int b = 0; b < NB; b++)
            acc[r][b] = 0.0f;
    for (int sb0 = 0; sb0 < nsb; sb0 += 32) {
        const int sb = sb0 + lane;
        float t[QR][NB];
        for (int r = 0; r < QR; r++)
            for (int b = 0; b < NB; b++)
                t[r][b] = 0.0f;
        if (sb < nsb) {
            const int c = sb * 32;
            double part[QR][NB];
            uint32_t wv[QR][4];
            for (int r = 0; r < QR; r++) {
                for (int b = 0; b < NB; b++)
                    part[r][b] = 0.0;
                if (r0 + r < rows)
                    load16(w + (size_t)(r0 + r) * (K / 2) + sb * 16, vec, wv[r]);
                else
                    wv[r][0] = wv[r][1] = wv[r][2] = wv[r][3] = 0u;
            }
#pragma unroll
            for (int e = 0; e < 32; e++) {
                double wd[QR];
                for (int r = 0; r < QR; r++)
                    wd[r] = e2m1_f64((wv[r][e >> 3] >> (4 * (e & 7))) & 15u);
                for (int b = 0; b < NB; b++) {
                    if (b < nb) {
                        const double q = xq[(size_t)b * K + c + e];
                        for (int r = 0; r < QR; r++)
                            part[r][b] = fma(q, wd[r], part[r][b]);
                    }
                }
            }
            for (int r = 0; r < QR; r++) {
                const float sw = r0 + r < rows ? v4d_e8m0(scale[(size_t)(r0 + r) * nsb + sb]) : 0.0f;
                for (int b = 0; b < NB; b++)
                    if (b < nb)
                        /* flat index b*nkb + sb/4, exactly the reference's qs[sb/4] */
                        t[r][b] = __fmul_rn(__fmul_rn(__double2float_rn(part[r][b]),
                                                      xs[(size_t)b * nkb_all + sb / 4]), sw);
            }
        }
        for (int g = 0; g < 32; g++) {
            if (sb0 + g >= nsb)
                break;
            for (int r = 0; r < QR; r++)
                for (int b = 0; b < NB; b++)
                    acc[r][b] = __fadd_rn(acc[r][b], __shfl_sync(0xffffffffu, t[r][b], g));
        }
    }
    if (lane == 0)
        for (int r = 0; r < QR; r++)
            for (int b = 0; b < NB; b++)
                if (b < nb && r0 + r < rows)
                    y[(size_t)b * ldy + r0 + r] = v4d_bf16(acc[r][b]);
}

/* The first of the QR rows of this block's warp in the QUANT kernels. */
__device__ __forceinline__ int quant_r0() { return (int)(blockIdx.x * QWARPS + (threadIdx.x >> 5)) * QR; }

/* The FP4 or FP8 rows of the calling warp (both kernels below call this). */
template <int NB, int FP4>
__device__ __forceinline__ void quant_rows(const uint8_t *w, const uint8_t *scale, int rows, int K, int nb,
                                           const double *xq, const float *xs, int nkb_all, float *y, int ldy,
                                           bool vec)
{
    if (FP4)
        quant_fp4_rows<NB>(w, scale, rows, K, nb, xq, xs, nkb_all, y, ldy, vec, quant_r0());
    else
        quant_fp8_rows<NB>(w, scale, rows, K, nb, xq, xs, nkb_all, y, ldy, vec, quant_r0());
}

/* y [nb][ldy] = W xq for nb <= NB vectors (v4cu_quant_fp8 / v4cu_quant_fp4). */
template <int NB, int FP4>
__global__ void __launch_bounds__(QWARPS * 32)
k_quant(const uint8_t *__restrict__ w, const uint8_t *__restrict__ scale, int rows, int K, int nb,
        const double *__restrict__ xq, const float *__restrict__ xs, int nkb_all, float *__restrict__ y, int ldy,
        bool vec)
{
    quant_rows<NB, FP4>(w, scale, rows, K, nb, xq, xs, nkb_all, y, ldy, vec);
}

/* Grouped products (cuda_moe.cu): blockIdx.y is a slot s of the (expert, row) pairs;
 * where tile[s] > 0, the tile[s] <= NB pairs from s on belong to expert eid[s], whose
 * weight and scale are wtab[eid[s]] and stab[eid[s]]; their activations are the rows
 * s.. of xq/xs (one act_quant over all pairs) and their outputs the rows s.. of y.
 * Each tile is computed exactly as the plain kernel computes a chunk of nb vectors. */
template <int NB, int FP4>
__global__ void __launch_bounds__(QWARPS * 32)
k_quant_grouped(const uint8_t *const *__restrict__ wtab, const uint8_t *const *__restrict__ stab,
                const int32_t *__restrict__ eid, const int32_t *__restrict__ tile, int rows, int K,
                const double *__restrict__ xq, const float *__restrict__ xs, float *__restrict__ y)
{
    const int s = blockIdx.y, nb = tile[s];
    if (nb <= 0)
        return;
    const int x = eid[s], nkb = K / 128;
    const uint8_t *w = wtab[x], *sc = stab[x];
    const bool vec = ((uintptr_t)w % 16u) == 0 && ((size_t)(FP4 ? K / 2 : K) % 16u) == 0;
    quant_rows<NB, FP4>(w, sc, rows, K, nb, xq + (size_t)s * K, xs + (size_t)s * nkb, nkb, y + (size_t)s * rows,
                        rows, vec);
}

/* Weight (r, j) of an EXACT matrix as the double the reference multiplies with. */
template <int TYPE>
__device__ __forceinline__ double exact_w(const void *w, const uint8_t *scale, size_t idx, int r, int j, int scols)
{
    if (TYPE == 3)
        return (double)__uint_as_float((uint32_t)static_cast<const uint16_t *>(w)[idx] << 16);
    if (TYPE == 4)
        return (double)static_cast<const float *>(w)[idx];
    const float sw = v4d_e8m0(scale[(size_t)(r / 128) * scols + j / 128]);
    return (double)v4d_bf16(__fmul_rn(v4d_e4m3(static_cast<const uint8_t *>(w)[idx]), sw));
}

/* One warp per block, 32 rows; tiles of 32 x XTJ weights in shared memory. */
template <int TYPE, int R8, int NB>
__global__ void __launch_bounds__(32)
k_exact(const void *__restrict__ w, const uint8_t *__restrict__ scale, int rows, int K, int nb,
        const float *__restrict__ x, float *__restrict__ y, int ldy)
{
    __shared__ double tile[32][XTJ + 1];
    __shared__ double xt[NB][XTJ];
    const int lane = threadIdx.x, rbase = blockIdx.x * 32, scols = (K + 127) / 128;
    double acc[NB];
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0;
    for (int j0 = 0; j0 < K; j0 += XTJ) {
        const int jn = K - j0 < XTJ ? K - j0 : XTJ;
        for (int i = lane; i < 32 * XTJ; i += 32) {
            int rr, jj;
            if (R8) {
                const int g = i / (XTJ * 8), rem = i % (XTJ * 8);
                jj = rem >> 3;
                rr = g * 8 + (rem & 7);
            } else {
                rr = i / XTJ;
                jj = i % XTJ;
            }
            const int r = rbase + rr, j = j0 + jj;
            if (jj < jn && r < rows) {
                const size_t idx = R8 ? ((size_t)(r >> 3) * (size_t)K + (size_t)j) * 8 + (size_t)(r & 7)
                                      : (size_t)r * (size_t)K + (size_t)j;
                tile[rr][jj] = exact_w<TYPE>(w, scale, idx, r, j, scols);
            }
        }
        for (int i = lane; i < NB * XTJ; i += 32) {
            const int b = i / XTJ, jj = i % XTJ;
            if (b < nb && jj < jn)
                xt[b][jj] = (double)x[(size_t)b * K + j0 + jj];
        }
        __syncwarp();
        if (rbase + lane < rows)
            for (int jj = 0; jj < jn; jj++) {
                const double wv = tile[lane][jj];
                for (int b = 0; b < NB; b++)
                    acc[b] = fma(xt[b][jj], wv, acc[b]);
            }
        __syncwarp();
    }
    if (rbase + lane < rows)
        for (int b = 0; b < NB; b++)
            if (b < nb)
                y[(size_t)b * ldy + rbase + lane] = __double2float_rn(acc[b]);
}

template <int TYPE, int R8>
cudaError_t launch_exact(const void *w, const uint8_t *scale, int rows, int K, int n, const float *x, float *y,
                         cudaStream_t st)
{
    const int blocks = (rows + 31) / 32;
    for (int b0 = 0; b0 < n;) {
        const int nb = n - b0;
        if (nb == 1) {
            const auto kern = k_exact<TYPE, R8, 1>;
            V4CU_LAUNCH(kern, blocks, 32, st, w, scale, rows, K, 1, x + (size_t)b0 * K, y + (size_t)b0 * rows, rows);
            b0 += 1;
        } else if (nb <= 4) {
            const auto kern = k_exact<TYPE, R8, 4>;
            V4CU_LAUNCH(kern, blocks, 32, st, w, scale, rows, K, nb, x + (size_t)b0 * K, y + (size_t)b0 * rows, rows);
            b0 += nb;
        } else {
            const int m = nb < 8 ? nb : 8;
            const auto kern = k_exact<TYPE, R8, 8>;
            V4CU_LAUNCH(kern, blocks, 32, st, w, scale, rows, K, m, x + (size_t)b0 * K, y + (size_t)b0 * rows, rows);
            b0 += m;
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

} /* namespace */


cudaError_t v4cu_act_quant(const float *x, int n, int K, double *xq, float *xs, cudaStream_t st)
{
    const int nkb = K / 128;
    if (nkb > 0) {
        V4CU_LAUNCH(k_act_quant, dim3((unsigned)nkb, (unsigned)n), 128, st, x, K, nkb, xq, xs);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    if (K % 128) {
        cudaError_t e = cudaMemset2DAsync(xq + (size_t)nkb * 128, sizeof(double) * (size_t)K, 0,
                                          sizeof(double) * (size_t)(K % 128), (size_t)n, st);
        if (e != cudaSuccess)
            return e;
    }
    return cudaMemsetAsync(xs + (size_t)n * nkb, 0, sizeof(float), st);
}

#define V4CU_QUANT_LAUNCHER(NAME, FP4, PERROW)                                                                 \
    cudaError_t NAME(const uint8_t *w, const uint8_t *scale, int rows, int K, int n, const double *xq,         \
                     const float *xs, float *y, cudaStream_t st)                                               \
    {                                                                                                          \
        const int blocks = (rows + QR * QWARPS - 1) / (QR * QWARPS), nkb = K / 128;                            \
        const bool vec = ((uintptr_t)w % 16u) == 0 && ((size_t)(PERROW) % 16u) == 0;                          \
        const auto k1 = k_quant<1, FP4>;                                                                       \
        const auto k4 = k_quant<4, FP4>;                                                                       \
        for (int b0 = 0; b0 < n;) {                                                                            \
            const int nb = n - b0 < 4 ? n - b0 : 4;                                                            \
            if (nb == 1)                                                                                       \
                V4CU_LAUNCH(k1, blocks, QWARPS * 32, st, w, scale, rows, K, 1, xq + (size_t)b0 * K,             \
                            xs + (size_t)b0 * nkb, nkb, y + (size_t)b0 * rows, rows, vec);                     \
            else                                                                                               \
                V4CU_LAUNCH(k4, blocks, QWARPS * 32, st, w, scale, rows, K, nb, xq + (size_t)b0 * K,            \
                            xs + (size_t)b0 * nkb, nkb, y + (size_t)b0 * rows, rows, vec);                     \
            b0 += nb;                                                                                          \
            cudaError_t e = cudaGetLastError();                                                                \
            if (e != cudaSuccess)                                                                              \
                return e;                                                                                      \
        }                                                                                                      \
        return cudaSuccess;                                                                                    \
    }

V4CU_QUANT_LAUNCHER(v4cu_quant_fp8, 0, K)
V4CU_QUANT_LAUNCHER(v4cu_quant_fp4, 1, K / 2)

cudaError_t v4cu_quant_grouped(int fp4, int nbt, const uint8_t *const *wtab, const uint8_t *const *stab,
                               const int32_t *eid, const int32_t *tile, int rows, int K, int npairs,
                               const double *xq, const float *xs, float *y, cudaStream_t st)
{
    if (npairs <= 0)
        return cudaSuccess;
    const dim3 grid((unsigned)((rows + QR * QWARPS - 1) / (QR * QWARPS)), (unsigned)npairs);
    void (*kern)(const uint8_t *const *, const uint8_t *const *, const int32_t *, const int32_t *, int, int,
                 const double *, const float *, float *);
    if (nbt == 1)
        kern = fp4 ? k_quant_grouped<1, 1> : k_quant_grouped<1, 0>;
    else if (nbt == 4)
        kern = fp4 ? k_quant_grouped<4, 1> : k_quant_grouped<4, 0>;
    else
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(kern, grid, QWARPS * 32, st, wtab, stab, eid, tile, rows, K, xq, xs, y);
    return cudaGetLastError();
}

cudaError_t v4cu_exact(int type, int r8, const void *w, const uint8_t *scale, int rows, int K, int n,
                       const float *x, float *y, cudaStream_t st)
{
    switch (type * 2 + (r8 ? 1 : 0)) {
    case 1 * 2 + 0: return launch_exact<1, 0>(w, scale, rows, K, n, x, y, st);
    case 1 * 2 + 1: return launch_exact<1, 1>(w, scale, rows, K, n, x, y, st);
    case 3 * 2 + 0: return launch_exact<3, 0>(w, scale, rows, K, n, x, y, st);
    case 3 * 2 + 1: return launch_exact<3, 1>(w, scale, rows, K, n, x, y, st);
    case 4 * 2 + 0: return launch_exact<4, 0>(w, scale, rows, K, n, x, y, st);
    case 4 * 2 + 1: return launch_exact<4, 1>(w, scale, rows, K, n, x, y, st);
    default: return cudaErrorInvalidValue;
    }
}
