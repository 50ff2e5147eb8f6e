/* cuda_gemm.cu — the CUDA backend's GEMM, through cuBLAS.
 *
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so A and B swap places in the cuBLAS call.
 * Compute modes are explicit: FP32 inputs run CUBLAS_COMPUTE_32F_PEDANTIC (no tensor cores, whatever
 * NVIDIA_TF32_OVERRIDE says) unless the descriptor asks for TF32 (CUBLAS_COMPUTE_32F_FAST_TF32); FP16/BF16 inputs
 * accumulate in FP32 (CUBLAS_COMPUTE_32F) into an FP32 C, or into a C of their own type when the descriptor's
 * c_type asks (cuBLAS rounds it as it writes). A grouped batch (batch_inner) is one pointer-array call
 * (cublasGemmBatchedEx): a small kernel writes the matrices' addresses on the stream first, so the host computes
 * nothing and the launch count does not grow with the batch; groups laid out as one strided batch take the strided
 * call. Not here: the handle's creation and stream (cuda_backend.cu), convolutions (cuda_conv.cu).
 */
#include "cuda_internal.h"

static cudaDataType_t blas_type(tfb_dtype t) {
    return t == TFB_F16 ? CUDA_R_16F : t == TFB_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static cublasComputeType_t blas_compute(const tfb_gemm_desc *d) {
    if (d->in_type != TFB_F32) return CUBLAS_COMPUTE_32F;
    return d->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
}

/* ptrs (3, batch): the addresses of matrix i of A, B and C */
__global__ void k_gemm_ptrs(const void **ptrs, tfb_gemm_desc d, int ea, int ec) {
    TFB_GRID_LOOP(i, (size_t)d.batch) {
        ptrs[i] = (const char *)d.a + tfb_gemm_offset(&d, d.stride_a, d.outer_a, (int)i) * ea;
        ptrs[d.batch + i] = (const char *)d.b + tfb_gemm_offset(&d, d.stride_b, d.outer_b, (int)i) * ea;
        ptrs[2 * d.batch + i] = (const char *)d.c + tfb_gemm_offset(&d, d.stride_c, d.outer_c, (int)i) * ec;
    }
}

/* A grouped batch: the addresses written on the stream, then one pointer-array GEMM (A and B swapped as above). */
static tfb_status gemm_grouped(cuda_ctx *c, const tfb_gemm_desc *d) {
    size_t n = (size_t)d->batch;
    TFB_CHECK(tfb_cuda_grow(c, &c->gemm_ptrs, &c->gemm_ptrs_bytes, 3 * n * sizeof(void *)));
    const void **p = (const void **)c->gemm_ptrs;
    k_gemm_ptrs<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, c->stream>>>(p, *d, (int)tfb_dtype_size(d->in_type),
                                                                        (int)tfb_dtype_size(d->c_type));
    TFB_CHECK_LAUNCH();
    cudaDataType_t t = blas_type(d->in_type);
    TFB_CHECK_CUBLAS(cublasGemmBatchedEx(
        c->blas, d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, d->n, d->m, d->k,
        &d->alpha, p + n, t, d->ldb, p, t, d->lda, &d->beta, (void *const *)(p + 2 * n), blas_type(d->c_type), d->ldc,
        d->batch, blas_compute(d), CUBLAS_GEMM_DEFAULT));
    return TFB_OK;
}

/* Groups that need pointer arrays: more than one, not laid out as one strided batch (each operand's groups
 * batch_inner strides apart, as head-major blocks of consecutive samples are). */
static int gemm_needs_groups(const tfb_gemm_desc *d) {
    long long g = d->batch_inner;
    if (g < 1 || g >= d->batch) return 0;
    return d->outer_a != g * d->stride_a || d->outer_b != g * d->stride_b || d->outer_c != g * d->stride_c;
}

static tfb_status cuda_gemm(void *ctx, const tfb_gemm_desc *d) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!tfb_gemm_desc_valid(d)) return TFB_ERR_ARG;
    if (gemm_needs_groups(d)) return gemm_grouped(c, d);
    cudaDataType_t t = blas_type(d->in_type);
    TFB_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
        c->blas, d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, d->n, d->m, d->k,
        &d->alpha, d->b, t, d->ldb, d->stride_b, d->a, t, d->lda, d->stride_a, &d->beta, d->c, blas_type(d->c_type),
        d->ldc, d->stride_c, d->batch, blas_compute(d), CUBLAS_GEMM_DEFAULT));
    return TFB_OK;
}

void tfb_cuda_gemm_install(tfb_backend *be) { be->gemm = cuda_gemm; }
