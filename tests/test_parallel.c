/* test_parallel.c — the building blocks of tensor and pipeline parallelism, on one process:
 * - the shard ops against the whole-tensor ops they replace: a vocabulary split in two (with padding) gives the
 *   loss and the logit gradients of xent_fwd/xent_bwd; sharded embedding lookups sum to the whole lookup;
 * - the strided 2-D copy;
 * - shard extract/insert round-trips for row blocks (QKV), padded rows (vocabulary) and columns;
 * - the linear partition is optimal (checked against brute force) and leaves no stage empty;
 * - the schedules: every micro-batch forward once before its backward, stage i of 1F1B holds at most
 *   min(P - i, M), GPipe holds M, and every send has its receive on the neighbour in the same order;
 * - the timing-mark protocol of tensor-group collectives, against a stub group of two whose peer holds the same
 *   data: every wait sits between a WORK mark and a TP mark, and the column-parallel backward starts its dX sum
 *   before the weight-gradient GEMM and waits for it after.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "../bench/bert_layer.h"
#include "../bench/schedule.h"
#include "../bench/workload.h"
#include "../kernels/backend.h"
#include "../kernels/philox.h"

static tfb_backend *be;

static void fill_random(float *x, size_t n, uint32_t stream) {
    tfb_philox_key k = tfb_philox_key_make(42, stream);
    for (size_t i = 0; i < n; i++) x[i] = 4.0f * tfb_u32_to_unit(tfb_philox_block(k, i, 0).v[0]) - 2.0f;
}

/* The whole cross-entropy over V classes against two shards of Vl = 8 columns (the last padded). */
static void test_xent_shards(void) {
    enum { N = 5, V = 13, VL = 8 };
    float logits[N * V], shard[2][N * VL], mx[2][N], sums[2][N * 2], loss_ref, d_ref[N * V], d[2][N * VL];
    int labels[N] = {0, 7, 8, 12, 3};
    fill_random(logits, N * V, 1);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++) shard[t][i * VL + j] = t * VL + j < V ? logits[i * V + t * VL + j] : 1e3f;
    be->xent_fwd(be->ctx, &loss_ref, logits, labels, N, V);
    be->xent_bwd(be->ctx, d_ref, logits, labels, N, V, 0.5f);
    for (int t = 0; t < 2; t++) be->xent_shard_max(be->ctx, mx[t], shard[t], N, VL, t ? V - VL : VL);
    for (int i = 0; i < N; i++) mx[0][i] = mx[1][i] = fmaxf(mx[0][i], mx[1][i]); /* the MAX all-reduce */
    for (int t = 0; t < 2; t++) be->xent_shard_sum(be->ctx, sums[t], shard[t], labels, mx[t], N, VL, t ? V - VL : VL, t * VL);
    for (int i = 0; i < 2 * N; i++) sums[0][i] = sums[1][i] = sums[0][i] + sums[1][i]; /* the SUM all-reduce */
    double loss = 0, err = 0;
    for (int i = 0; i < N; i++) loss += log((double)sums[0][2 * i]) + mx[0][i] - sums[0][2 * i + 1];
    for (int t = 0; t < 2; t++) {
        be->xent_shard_bwd(be->ctx, d[t], shard[t], labels, mx[t], sums[t], N, VL, t ? V - VL : VL, t * VL, 0.5f);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++) {
                float want = t * VL + j < V ? d_ref[i * V + t * VL + j] : 0.0f;
                err = fmax(err, fabs((double)d[t][i * VL + j] - want));
            }
    }
    EXPECT("xent_shards_loss_equals_whole", fabs(loss - loss_ref) < 1e-5 * fabs((double)loss_ref), "%g vs %g", loss, loss_ref);
    EXPECT("xent_shards_grad_equals_whole_padding_zero", err < 1e-6, "max err %g", err);
}

static void test_embedding_shards(void) {
    enum { N = 6, H = 4, V = 10 };
    float table[V * H], whole[N * H], part[2][N * H], dt[2][5 * H], dref[V * H], dout[N * H];
    int ids[N] = {0, 9, 4, 5, 5, 2}, order[N], count[V + 1];
    tfb_embed_order(ids, N, V, order, count);
    fill_random(table, V * H, 2);
    fill_random(dout, N * H, 3);
    be->embedding_fwd(be->ctx, whole, table, ids, N, H, 0);
    memset(dref, 0, sizeof dref);
    memset(dt, 0, sizeof dt);
    be->embedding_bwd(be->ctx, dref, dout, ids, order, N, H);
    double err = 0;
    for (int t = 0; t < 2; t++) {
        be->embedding_fwd_shard(be->ctx, part[t], table + t * 5 * H, ids, N, H, t * 5, 5, 0);
        be->embedding_bwd_shard(be->ctx, dt[t], dout, ids, order, N, H, t * 5, 5);
    }
    for (int i = 0; i < N * H; i++) err = fmax(err, fabs((double)part[0][i] + part[1][i] - whole[i]));
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 5 * H; i++) err = fmax(err, fabs((double)dt[t][i] - dref[t * 5 * H + i]));
    EXPECT("embedding_shards_sum_to_whole_lookup_and_scatter", err == 0, "max err %g", err);
}

static void test_copy_2d(void) {
    float src[3 * 5], dst[3 * 4] = {0};
    for (int i = 0; i < 15; i++) src[i] = (float)i;
    be->copy_2d(be->ctx, dst, 4, src + 1, 5, 3, 2);
    EXPECT("copy_2d_strided_block", dst[0] == 1 && dst[1] == 2 && dst[4] == 6 && dst[9] == 12 && dst[2] == 0, "%g %g", dst[4], dst[9]);
}

/* Splits `full` into T shards and puts them back; every element lands where it came from. */
static int round_trip(tfb_param_info p, int T) {
    size_t n = (size_t)p.full_rows * p.full_cols;
    float *full = malloc(n * sizeof *full), *back = calloc(n, sizeof *back), *local = malloc(p.numel * sizeof *local);
    int ok = full && back && local;
    for (size_t i = 0; ok && i < n; i++) full[i] = (float)i;
    for (int t = 0; ok && t < T; t++) {
        tfb_shard_extract(&p, t, full, local);
        tfb_shard_insert(&p, t, local, back);
    }
    ok = ok && memcmp(full, back, n * sizeof *full) == 0;
    free(full);
    free(back);
    free(local);
    return ok;
}

static void test_shard_mapping(void) {
    tfb_param_info qkv = {.rows = 6, .cols = 3, .numel = 18, .full_rows = 12, .full_cols = 3, .shard = TFB_SHARD_ROWS,
                          .blocks = 3};
    tfb_param_info vocab = {.rows = 4, .cols = 2, .numel = 8, .full_rows = 7, .full_cols = 2, .shard = TFB_SHARD_ROWS,
                            .blocks = 1};
    tfb_param_info cols = {.rows = 3, .cols = 2, .numel = 6, .full_rows = 3, .full_cols = 4, .shard = TFB_SHARD_COLS,
                           .blocks = 1};
    float full[36], local[18];
    for (int i = 0; i < 36; i++) full[i] = (float)i;
    tfb_shard_extract(&qkv, 1, full, local); /* rank 1 of 2: rows 2-3 of Q, 6-7 of K, 10-11 of V */
    EXPECT("shard_qkv_rank1_takes_its_heads_of_q_k_v", local[0] == 6 && local[6] == 18 && local[12] == 30, "%g %g %g",
           local[0], local[6], local[12]);
    tfb_shard_extract(&vocab, 1, full, local); /* rows 4..7 of 7: the last row is padding */
    EXPECT("shard_vocab_padding_rows_zero", local[0] == 8 && local[5] == 13 && local[6] == 0 && local[7] == 0, "%g %g",
           local[0], local[6]);
    EXPECT("shard_round_trips", round_trip(qkv, 2) && round_trip(vocab, 2) && round_trip(cols, 2), "mismatch");
}

/* Smallest largest part over every placement of parts - 1 cuts (n small). */
static double brute_best(const double *c, int n, int parts, int from) {
    if (parts == 1) {
        double s = 0;
        for (int i = from; i < n; i++) s += c[i];
        return s;
    }
    double best = INFINITY, s = 0;
    for (int end = from + 1; end <= n - parts + 1; end++) {
        s += c[end - 1];
        double rest = brute_best(c, n, parts - 1, end), v = s > rest ? s : rest;
        if (v < best) best = v;
    }
    return best;
}

static void test_partition(void) {
    double costs[7] = {0.1, 5, 5, 5, 5, 9, 1};
    int ok = 1;
    for (int parts = 1; parts <= 7; parts++) {
        int first[8];
        ok &= tfb_partition(costs, 7, parts, first) == TFB_OK;
        double worst = 0;
        for (int p = 0; p < parts; p++) {
            double s = 0;
            ok &= first[p + 1] > first[p];
            for (int i = first[p]; i < first[p + 1]; i++) s += costs[i];
            worst = s > worst ? s : worst;
        }
        ok &= first[0] == 0 && first[parts] == 7 && fabs(worst - brute_best(costs, 7, parts, 0)) < 1e-12;
    }
    int first[9];
    EXPECT("partition_optimal_and_non_empty", ok && tfb_partition(costs, 7, 8, first) == TFB_ERR_ARG, "bad partition");
}

/* Walks the stages' operation lists like the transport would: a stage may pass a transfer only when its
 * neighbour reaches the matching one. Returns 1 when every list completes (no deadlock) and the pairs match. */
static int simulate(tfb_schedule_kind kind, int P, int M) {
    tfb_op ops[8][64];
    int n[8], at[8] = {0}, progress = 1;
    for (int s = 0; s < P; s++) n[s] = tfb_schedule_build(kind, P, s, M, ops[s]);
    while (progress) {
        progress = 0;
        for (int s = 0; s < P; s++) {
            if (at[s] == n[s]) continue;
            const tfb_op *op = &ops[s][at[s]];
            if (op->kind == TFB_OP_FWD || op->kind == TFB_OP_BWD) { at[s]++; progress = 1; continue; }
            int peer = op->kind == TFB_OP_RECV_ACT || op->kind == TFB_OP_SEND_GRAD || op->kind == TFB_OP_SEND_GRAD_RECV_ACT
                           ? s - 1 : s + 1;
            if (peer < 0 || peer >= P || at[peer] == n[peer]) return 0;
            const tfb_op *q = &ops[peer][at[peer]];
            int pair = (op->kind == TFB_OP_SEND_ACT && q->kind == TFB_OP_RECV_ACT && q->mb == op->mb) ||
                       (op->kind == TFB_OP_RECV_ACT && q->kind == TFB_OP_SEND_ACT && q->mb == op->mb) ||
                       (op->kind == TFB_OP_SEND_GRAD && q->kind == TFB_OP_RECV_GRAD && q->mb == op->mb) ||
                       (op->kind == TFB_OP_RECV_GRAD && q->kind == TFB_OP_SEND_GRAD && q->mb == op->mb) ||
                       (op->kind == TFB_OP_SEND_ACT_RECV_GRAD && q->kind == TFB_OP_SEND_GRAD_RECV_ACT &&
                        q->mb == op->mb2 && q->mb2 == op->mb) ||
                       (op->kind == TFB_OP_SEND_GRAD_RECV_ACT && q->kind == TFB_OP_SEND_ACT_RECV_GRAD &&
                        q->mb == op->mb2 && q->mb2 == op->mb);
            if (!pair) continue; /* the neighbour is not there yet */
            at[s]++;
            at[peer]++;
            progress = 1;
        }
    }
    for (int s = 0; s < P; s++)
        if (at[s] != n[s]) return 0;
    return 1;
}

static void test_schedules(void) {
    int ok_order = 1, ok_hold = 1, ok_pairs = 1;
    for (int kind = 0; kind < 2; kind++)
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 7; M++) {
                ok_pairs &= simulate((tfb_schedule_kind)kind, P, M);
                for (int s = 0; s < P; s++) {
                    tfb_op ops[64];
                    int n = tfb_schedule_build((tfb_schedule_kind)kind, P, s, M, ops), fwd[8] = {0}, bwd[8] = {0};
                    for (int i = 0; i < n; i++) {
                        if (ops[i].kind == TFB_OP_FWD) fwd[ops[i].mb]++;
                        if (ops[i].kind == TFB_OP_BWD) ok_order &= fwd[ops[i].mb] == 1 && bwd[ops[i].mb]++ == 0;
                    }
                    for (int m = 0; m < M; m++) ok_order &= fwd[m] == 1 && bwd[m] == 1;
                    int want = kind == TFB_SCHED_1F1B ? (P - s < M ? P - s : M) : M;
                    ok_hold &= tfb_schedule_in_flight(ops, n) == want;
                }
            }
    EXPECT("schedules_each_microbatch_forward_then_backward_once", ok_order, "order");
    EXPECT("schedules_hold_1f1b_min_P_minus_i_M_gpipe_M", ok_hold, "in flight");
    EXPECT("schedules_transfers_pair_up_without_deadlock", ok_pairs, "deadlock or mismatched pair");
    EXPECT("schedule_bubble_formula", fabs(tfb_schedule_bubble(4, 8) - 3.0 / 11) < 1e-15, "%g", tfb_schedule_bubble(4, 8));
}

/* ---- tensor-group collectives between timing marks ---- */

static char events[64]; /* one letter per event: a all-reduce, i start, w wait, W / T marks of WORK / TP */
static void note(char e) {
    size_t n = strlen(events);
    if (n + 1 < sizeof events) events[n] = e;
}
static void doubled(void *buf, size_t n) { for (size_t i = 0; i < n; i++) ((float *)buf)[i] *= 2.0f; }
static tfb_status stub_allreduce(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, tfb_comm_op op) {
    (void)c; (void)t; (void)op;
    note('a');
    doubled(buf, n);
    return TFB_OK;
}
static tfb_status stub_iallreduce(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, tfb_comm_op op,
                                  tfb_comm_request **req) {
    (void)c; (void)t; (void)op;
    note('i');
    doubled(buf, n); /* the stub finishes at once; the order of the calls is what is checked */
    *req = NULL;
    return TFB_OK;
}
static tfb_status stub_wait(tfb_comm *c, tfb_comm_request *req) {
    (void)c; (void)req;
    note('w');
    return TFB_OK;
}
static tfb_status stub_mark(void *ctx, tfb_mark_kind kind) {
    (void)ctx;
    note(kind == TFB_MARK_TP ? 'T' : kind == TFB_MARK_WORK ? 'W' : 'R');
    return TFB_OK;
}

static void test_tp_marks(void) {
    enum { N = 3, IN = 4, OUT = 5 };
    tfb_comm tp = {.rank = 0, .size = 2, .allreduce = stub_allreduce, .iallreduce = stub_iallreduce,
                   .wait = stub_wait};
    tfb_workload wl = {.mark = stub_mark};
    float buf[6] = {1, 2, 3, 4, 5, 6};
    tfb_status st = tfb_workload_tp_allreduce(&wl, &tp, buf, 6, TFB_SUM);
    EXPECT("tp_allreduce_wait_between_work_and_tp_marks", st == TFB_OK && strcmp(events, "WaT") == 0 &&
           buf[5] == 12.0f && wl.tp_bus_bytes == 2.0 * 0.5 * 6 * 4, "events %s, bytes %g", events, wl.tp_bus_bytes);
    float dout[N * OUT], in[N * IN], w[OUT * IN], din[N * IN], dw[OUT * IN] = {0}, ref[N * IN], dw_ref[OUT * IN] = {0};
    fill_random(dout, N * OUT, 1);
    fill_random(in, N * IN, 2);
    fill_random(w, OUT * IN, 3);
    bert_ctx c = {.be = be, .gemm_type = TFB_F32};
    bert_linear_bwd(&c, ref, dw_ref, NULL, dout, in, w, N, IN, OUT); /* no group: the single-device gradients */
    c.tp = &tp;
    c.wl = &wl;
    memset(events, 0, sizeof events);
    st = bert_col_parallel_bwd(&c, din, dw, NULL, dout, in, w, N, IN, OUT);
    int same = 1;
    for (int i = 0; i < N * IN; i++) same &= fabsf(din[i] - 2.0f * ref[i]) <= 1e-6f * fabsf(ref[i]) + 1e-7f;
    for (int i = 0; i < OUT * IN; i++) same &= dw[i] == dw_ref[i];
    EXPECT("tp_col_parallel_bwd_starts_dx_sum_waits_after_weight_gemm", st == TFB_OK && strcmp(events, "iWwT") == 0 &&
           same, "events %s, gradients %s", events, same ? "as expected" : "wrong");
}

int main(void) {
    char why[128];
    if (tfb_backend_open(&(tfb_backend_spec){.name = "cpu", .threads = 1}, &be, why, sizeof why) != TFB_OK) return 1;
    test_xent_shards();
    test_embedding_shards();
    test_copy_2d();
    test_shard_mapping();
    test_partition();
    test_schedules();
    test_tp_marks();
    be->destroy(be);
    return test_failures ? 1 : 0;
}
