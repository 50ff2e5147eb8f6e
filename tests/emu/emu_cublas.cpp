/* emu_cublas.cpp — the cuBLAS calls that cuda_gemm.cu makes, computed on the CPU, for the emulated CUDA backend
 * (cuda_emu_backend.cpp). Written from cuBLAS's definition (column-major storage, op(A) (m, k) times op(B) (k, n)
 * into C (m, n), element (i, j) of a matrix at i + j * ld), not from tfbench's row-major descriptor, so that
 * cuda_gemm.cu's translation between the two (operands swapped, leading dimensions, pointer arrays, types) is
 * checked against the CPU backend without a GPU. It returns the status cuBLAS documents for bad leading dimensions
 * and for type combinations cublasGemmEx does not support, never reads C when beta is 0, and rounds FP32 inputs to
 * TF32 only under CUBLAS_COMPUTE_32F_FAST_TF32.
 * Deliberately absent: every other cuBLAS call, streams (calls run at once, in order), and speed (plain loops).
 */
#include <stdlib.h>
#include <vector>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "emu_tf32.h"

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = (cublasHandle_t)calloc(1, sizeof(cublasContext));
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS (other)";
    }
}

/* ---- one GEMM, as cuBLAS defines it ---- */

typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    cudaDataType ab, c;  /* A and B's type, C's */
    int lda, ldb, ldc;
    int tf32;            /* FP32 inputs rounded to TF32 (10-bit mantissa, nearest even) */
} gemm_call;

static float load(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

static void store(void *p, cudaDataType t, size_t i, float x) {
    if (t == CUDA_R_16F) ((__half *)p)[i] = __float2half_rn(x);
    else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else ((float *)p)[i] = x;
}

/* cublasGemmEx's table for the compute types tfbench could ask for: A and B of one type; FP32 compute takes FP32
 * into FP32, or FP16/BF16 into their own type or FP32; the TF32 modes take FP32 only. */
static int gemm_types_supported(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute) {
    if (a != b) return 0;
    if (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC) {
        if (a == CUDA_R_32F) return c == CUDA_R_32F;
        return (a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F);
    }
    return compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a == CUDA_R_32F && c == CUDA_R_32F;
}

static int op_valid(cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T; }
static int at_least(int ld, int rows) { return ld >= (rows > 1 ? rows : 1); }

/* CUBLAS_STATUS_SUCCESS when cuBLAS would run the call (batch: its batchCount). */
static cublasStatus_t gemm_check(cublasHandle_t h, const gemm_call *g, cudaDataType bt, cublasComputeType_t compute,
                                 int batch) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_valid(g->ta) || !op_valid(g->tb) || g->m < 0 || g->n < 0 || g->k < 0 || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows = g->ta == CUBLAS_OP_N ? g->m : g->k, b_rows = g->tb == CUBLAS_OP_N ? g->k : g->n;
    if (!at_least(g->lda, a_rows) || !at_least(g->ldb, b_rows) || !at_least(g->ldc, g->m))
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_types_supported(g->ab, bt, g->c, compute) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* C = alpha op(A) op(B) + beta C for one matrix, C read only when beta is not 0. The sums are in double and
 * rounded once: the reference's own rounding stays far below what the checks it serves can see. */
static void gemm_one(const gemm_call *g, const void *A, const void *B, void *C) {
    std::vector<float> a((size_t)g->m * g->k), b((size_t)g->n * g->k); /* op(A) by rows, op(B) by columns */
    for (int i = 0; i < g->m; i++)
        for (int p = 0; p < g->k; p++) {
            size_t at = g->ta == CUBLAS_OP_N ? i + (size_t)p * g->lda : p + (size_t)i * g->lda;
            float v = load(A, g->ab, at);
            a[(size_t)i * g->k + p] = g->tf32 ? emu_round_tf32(v) : v;
        }
    for (int j = 0; j < g->n; j++)
        for (int p = 0; p < g->k; p++) {
            size_t at = g->tb == CUBLAS_OP_N ? p + (size_t)j * g->ldb : j + (size_t)p * g->ldb;
            float v = load(B, g->ab, at);
            b[(size_t)j * g->k + p] = g->tf32 ? emu_round_tf32(v) : v;
        }
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            double acc = 0.0;
            for (int p = 0; p < g->k; p++) acc += (double)a[(size_t)i * g->k + p] * b[(size_t)j * g->k + p];
            size_t at = i + (size_t)j * g->ldc;
            double out = g->alpha * acc;
            if (g->beta != 0.0f) out += g->beta * (double)load(C, g->c, at);
            store(C, g->c, at, (float)out);
        }
}

static gemm_call gemm_describe(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                               cudaDataType at, int lda, int ldb, const void *beta, cudaDataType ct, int ldc,
                               cublasComputeType_t compute) {
    return gemm_call{ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta, at, ct, lda, ldb, ldc,
                     compute == CUBLAS_COMPUTE_32F_FAST_TF32};
}

static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA, const void *B,
    cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
    long long int strideC, int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    gemm_call g = gemm_describe(transa, transb, m, n, k, alpha, Atype, lda, ldb, beta, Ctype, ldc, computeType);
    cublasStatus_t st = gemm_check(handle, &g, Btype, computeType, batchCount);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    size_t ea = type_size(Atype), ec = type_size(Ctype);
    for (int i = 0; i < batchCount && m && n; i++)
        gemm_one(&g, (const char *)A + i * strideA * (long long)ea, (const char *)B + i * strideB * (long long)ea,
                 (char *)C + i * strideC * (long long)ec);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                                const void *const Aarray[], cudaDataType Atype, int lda,
                                                const void *const Barray[], cudaDataType Btype, int ldb,
                                                const void *beta, void *const Carray[], cudaDataType Ctype, int ldc,
                                                int batchCount, cublasComputeType_t computeType,
                                                cublasGemmAlgo_t algo) {
    (void)algo;
    gemm_call g = gemm_describe(transa, transb, m, n, k, alpha, Atype, lda, ldb, beta, Ctype, ldc, computeType);
    cublasStatus_t st = gemm_check(handle, &g, Btype, computeType, batchCount);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (batchCount && (!Aarray || !Barray || !Carray)) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batchCount && m && n; i++) gemm_one(&g, Aarray[i], Barray[i], Carray[i]);
    return CUBLAS_STATUS_SUCCESS;
}
